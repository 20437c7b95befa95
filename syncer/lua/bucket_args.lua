-- The single-rule bucket script's inputs, under the names bucket.lua
-- expects, read straight from KEYS and ARGV (nothing before it: the script
-- runs without the prelude). KEYS[1] = k, its state; ARGV[1] = now ('' for
-- Redis's clock), ARGV[2] = the cost n, ARGV[3] = the fingerprint fp,
-- ARGV[4] = burst, rl, el and tau packed as four little-endian doubles (one
-- argument costs Redis less than four to parse). It commits, and has no log.
local k, now = KEYS[1], ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(now)
end
local n, fp = tonumber(ARGV[2]), ARGV[3]
local burst, rl, el, tau = struct.unpack('<dddd', ARGV[4])
local commit, lk = true, nil
