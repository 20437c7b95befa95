-- Token bucket, leaky bucket (meter) and GCRA: one formulation, written as
-- statements, not a function, so that the single-rule script runs it as a
-- flat chunk (the hot one: no function and no table is created per call)
-- while the multi-rule and refund scripts run it as the body of their
-- decide_bucket (scripts.go). Expects defined before it: k (its state),
-- lk (the log key, or nil), now, n (cost), commit, fp (the bucket's
-- fingerprint, rl:el:tau), burst, rl, el, tau (the rule's numbers), and
-- answer and form: each of its two returns is answer(form, ...) of the
-- decision's six numbers, which the single-rule script packs into one
-- string and the others make a table.
--
-- The window algorithms keep their state under the same name, in a hash: a
-- rule that changed family finds a key of the other type (WRONGTYPE), which
-- it deletes, with the log when given, and starts afresh (below).
--
-- State: the string k = tat, frac and z as three little-endian doubles (24
-- bytes, struct's '<ddd'; each an integer below 2^53, so exact), then the
-- bucket's fingerprint fp = "rl:el:tau" as text: the three numbers that
-- make its decisions, whichever bucket algorithm and window spell them, so
-- a limit changed to the same rate and burst keeps the state as it is. tat is the TAT in whole us, frac its fraction
-- in units of 1/rl us, z how many admissions found the bucket full (its TAT
-- in the past: a refund checks it did not change, or it would hand back
-- tokens the refill had already made up). One GET, one SET with its TTL;
-- binary, because reading and writing three numbers with struct costs Redis
-- less than parsing and formatting them as text.
--
-- Arithmetic: every value is an integer in [0, 2^52] and every divisor at
-- least 1, so floor(a / b) is the exact quotient (IEEE division rounds
-- correctly, and a + b <= 2^53 keeps the rounded quotient below the next
-- integer).
local floor = math.floor -- a local: a global and a field lookup less per call
local tat, frac, z = 0, 0, 0
local state = redis.pcall('GET', k)
if type(state) == 'table' then
  -- An error: a hash under the name is the window family's state (it has a
  -- fingerprint), deleted as prelude's other_family does; this chunk runs
  -- without the prelude. Anything else is raised.
  if not (string.find(state.err, 'WRONGTYPE', 1, true) and redis.call('TYPE', k).ok == 'hash' and
      redis.call('HEXISTS', k, 'fp') == 1) then
    error(state)
  end
  redis.call('DEL', k)
  if lk then redis.call('DEL', lk) end
  state = false
end
if state then
  local f = string.sub(state, 25)
  if f ~= fp then
    -- The rate or the burst changed: keep the tokens, clamped to the new
    -- burst. The old fingerprint is rl:el:tau; a value that has none is not a
    -- bucket's state (another application's, under the name).
    local o = {}
    if string.find(f, '^%d+:%d+:%d+$') then
      for x in string.gmatch(f, '%d+') do o[#o + 1] = tonumber(x) end
    else
      error('hybridlimit: ' .. k .. ' holds a string that is not a bucket state')
    end
    tat, frac, z = struct.unpack('<ddd', state)
    if tat < now or (tat == now and frac == 0) then
      tat, frac = 0, 0 -- nothing pending: as a new key
    else
      local tokens = 0
      local orl, oel, otau = o[1], o[2], o[3]
      if tat - now <= floor((otau + orl - 1) / orl) then
        tokens = floor(math.max(otau - ((tat - now) * orl + frac), 0) / oel)
      end
      local g = (burst - math.min(tokens, burst)) * el
      local q = floor(g / rl)
      tat, frac = now + q, g - q * rl
    end
    redis.call('SET', k, struct.pack('<ddd', tat, frac, z) .. fp, 'PX', floor((math.max(tat - now, 0) + 999) / 1000) + 1000)
  else
    tat, frac, z = struct.unpack('<ddd', state)
  end
end
local full = tat < now
if full then
  tat, frac = now, 0
else
  local early = tat - floor((tau + rl - 1) / rl)
  if now < early then now = early end -- time ran back before any stored time
end
local dl = (tat - now) * rl + frac -- (TAT - now) * rl
local need = n * el
if dl + need > tau then
  return answer(form, 1, floor(math.max(tau - dl, 0) / el), floor((dl + rl - 1) / rl), floor((dl + need - tau + rl - 1) / rl), now, z)
end
dl = dl + need
local reset = floor((dl + rl - 1) / rl)
if commit and n > 0 then
  if full then z = z + 1 end
  local f = frac + need
  local q = floor(f / rl)
  redis.call('SET', k, struct.pack('<ddd', tat + q, f - q * rl, z) .. fp, 'PX', floor((reset + 999) / 1000) + 1000)
end
return answer(form, 0, floor((tau - dl) / el), reset, 0, now, z)
