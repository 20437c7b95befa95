-- hybridlimit: helpers shared by every script.
--
-- Every value is an integer below 2^53, exact in Lua's doubles; the limits'
-- validation (local.MaxProduct = 2^51) keeps every product and sum there.
-- Times are microseconds since the Unix epoch. Each algorithm is the exact
-- twin of its Go implementation in local/algo.go: same state, same
-- transition, same decision.

-- fdiv is floor(a / b) for 0 <= a, a + b < 2^53, b > 0: the quotient of the
-- doubles, corrected by the sign of the remainder, which is exact there.
local function fdiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then return q - 1 end
  if r >= b then return q + 1 end
  return q
end
local function fmod(a, b) return a - fdiv(a, b) * b end
local function cdiv(a, b) return fdiv(a + b - 1, b) end
-- fmt writes an integer in full: tostring would keep only 14 digits.
local function fmt(x) return string.format('%d', x) end

-- now: the time passed in (tests, simulations), or Redis's clock.
local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A rule's parameters: ARGV[i] is its fingerprint, the nine numbers that
-- follow joined by ':'; the state stores it to notice a limit changed.
local NPARAMS = 10
local function params(i)
  return {
    fp = ARGV[i], alg = tonumber(ARGV[i + 1]), L = tonumber(ARGV[i + 2]),
    w = tonumber(ARGV[i + 3]), burst = tonumber(ARGV[i + 4]),
    step = tonumber(ARGV[i + 5]), ws = tonumber(ARGV[i + 6]),
    rl = tonumber(ARGV[i + 7]), el = tonumber(ARGV[i + 8]), tau = tonumber(ARGV[i + 9]),
  }
end
local function parse_fp(s)
  local v = {}
  for x in string.gmatch(s, '[^:]+') do v[#v + 1] = tonumber(x) end
  return {alg = v[1], L = v[2], w = v[3], burst = v[4], step = v[5], ws = v[6], rl = v[7], el = v[8], tau = v[9]}
end

-- expire sets a key's TTL to us microseconds from now, rounded up to the
-- millisecond, plus a second of grace: every key has a TTL, and it outlives
-- the state it holds.
local function expire(key, us)
  redis.call('PEXPIRE', key, cdiv(math.max(us, 0), 1000) + 1000)
end
