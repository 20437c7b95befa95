-- Helpers of the scripts that take a rule's parameters (as a table: params), and of a state's TTL and family.

-- A rule's parameters: ARGV[i] is its fingerprint, the nine numbers that
-- follow joined by ':', and ':1' when anchored; the state stores it to
-- notice a limit changed. The tenth number is 1 for anchored windows.
local NPARAMS = 11
local function params(i)
  return {
    fp = ARGV[i], alg = tonumber(ARGV[i + 1]), L = tonumber(ARGV[i + 2]),
    w = tonumber(ARGV[i + 3]), burst = tonumber(ARGV[i + 4]),
    step = tonumber(ARGV[i + 5]), ws = tonumber(ARGV[i + 6]),
    rl = tonumber(ARGV[i + 7]), el = tonumber(ARGV[i + 8]), tau = tonumber(ARGV[i + 9]),
    anch = tonumber(ARGV[i + 10]),
  }
end
local function parse_fp(s)
  local v = {}
  for x in string.gmatch(s, '[^:]+') do v[#v + 1] = tonumber(x) end
  return {alg = v[1], L = v[2], w = v[3], burst = v[4], step = v[5], ws = v[6], rl = v[7], el = v[8], tau = v[9], anch = v[10] or 0}
end

-- expire sets a key's TTL to us microseconds from now, rounded up to the
-- millisecond, plus a second of grace: every key has a TTL, and it outlives
-- the state it holds.
local function expire(key, us)
  redis.call('PEXPIRE', key, ttl_ms(us))
end

-- bucket_alg reports whether alg numbers a bucket algorithm, whose state
-- is a string; the window algorithms' is a hash.
local function bucket_alg(alg) return alg >= 4 and alg <= 6 end

-- bucket_fp is the fingerprint a bucket's state holds (see bucket.lua):
-- rl:el:tau, the numbers that make its decisions.
local function bucket_fp(p) return fmt(p.rl) .. ':' .. fmt(p.el) .. ':' .. fmt(p.tau) end
