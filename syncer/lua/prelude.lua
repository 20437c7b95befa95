-- hybridlimit: helpers shared by every script.
--
-- Every value is an integer below 2^53, exact in Lua's doubles; the limits'
-- validation (package local bounds products by 2^51) keeps every product and
-- sum there.
-- Times are microseconds since the Unix epoch. Each algorithm is the exact
-- twin of its Go implementation in local/algo.go: same state, same
-- transition, same decision.

-- fdiv is floor(a / b) for integers 0 <= a, 1 <= b, a + b <= 2^53: IEEE
-- division rounds correctly, and the rounded quotient of m - e/b (e >= 1)
-- reaches m only if m * b >= 2^53. The limits' validation keeps every
-- dividend at or below 2^52.
local function fdiv(a, b) return math.floor(a / b) end
local function fmod(a, b) return a - fdiv(a, b) * b end
local function cdiv(a, b) return fdiv(a + b - 1, b) end
-- fmt writes an integer in full: tostring would keep only 14 digits.
local function fmt(x) return string.format('%d', x) end

-- other_family handles r, the error a read of state key k returned. A rule
-- that changed between the window algorithms, whose state is a hash with a
-- fingerprint, and the buckets, whose state is a string of numbers and fp,
-- finds the other family's state under its name: it deletes it, with the
-- log lk when given, and starts afresh. Anything else (another
-- application's value under the name) is left alone, and the error raised.
-- A bucket's string is 24 bytes of numbers, then its fingerprint rl:el:tau
-- (see bucket.lua).
local function other_family(r, k, lk)
  if string.find(r.err, 'WRONGTYPE', 1, true) then
    local t = redis.call('TYPE', k).ok
    if (t == 'string' and string.find(redis.call('GET', k), '^%d+:%d+:%d+$', 25)) or
        (t == 'hash' and redis.call('HEXISTS', k, 'fp') == 1) then
      redis.call('DEL', k)
      if lk then redis.call('DEL', lk) end
      return
    end
  end
  error(r)
end

-- demand_total sums the demands of ds (node -> requests per window, -1 where
-- unknown: the node's first exchange of a new key, too soon to measure
-- one), each unknown one counted as the average of the known ones, or as
-- none when no demand is known. It returns the total, how many are known,
-- and the average an unknown demand counts as.
local function demand_total(ds, none)
  local total, known, n = 0, 0, 0
  for _, d in pairs(ds) do
    n = n + 1
    if d >= 0 then total, known = total + d, known + 1 end
  end
  local avg = none
  if known > 0 then avg = total / known end
  return total + (n - known) * avg, known, avg
end

-- ttl_ms is a TTL of us microseconds, in milliseconds rounded up, plus a
-- second of grace: every key outlives the state it holds.
local function ttl_ms(us) return cdiv(math.max(us, 0), 1000) + 1000 end

-- now: the time passed in (tests, simulations), or Redis's clock.
local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
