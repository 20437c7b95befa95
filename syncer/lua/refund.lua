-- Refunds a reservation of a multi-rule decision that another rule refused
-- (central mode across Cluster slots: reserve, then commit or refund).
-- KEYS[1] state, KEYS[2] log; ARGV[1] = the time the reservation was decided
-- at (its script returned it), ARGV[2] = its cost, ARGV[3] = the bucket's
-- reset count it returned, ARGV[4..] = the rule's parameters. A refund undoes
-- exactly what the reservation added, where it is still there and undoing it
-- cannot admit more than the limit: not if the limit changed since (the
-- state was carried over to the new limit), nor, for a bucket, if an
-- admission since found it full (the refill already made the tokens up).
-- Returns the rule's decision for a cost of 0 at the reservation's time: its
-- state without this request.
local at, n, z, p = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), params(4)
local k, lk = KEYS[1], KEYS[2]

local function refund()
  if n <= 0 then return end
  -- A key of the other family's type: the rule changed family since, and
  -- there is nothing to refund (the decision below starts it afresh).
  local hash = not bucket_alg(p.alg)
  if redis.call('TYPE', k).ok ~= (hash and 'hash' or 'string') then return end
  if hash and redis.call('HGET', k, 'fp') ~= p.fp then return end
  if p.alg == 1 or p.alg == 3 then -- fixed window, counter: the window it counted in
    local st = redis.call('HMGET', k, 'a', 'b', 'c')
    local start, cur, prev = tonumber(st[1]) or 0, tonumber(st[2]) or 0, tonumber(st[3]) or 0
    local ws = at - fmod(at, p.w)
    if p.anch == 1 and start <= at and at < start + p.w then ws = start end
    if start == ws then
      redis.call('HSET', k, 'b', fmt(math.max(cur - n, 0)))
    elseif p.alg == 3 and start == ws + p.w then -- it is the previous window now
      redis.call('HSET', k, 'c', fmt(math.max(prev - n, 0)))
    end
  elseif p.alg == 7 then -- sub-window counter: take n off at's sub-window
    local st = redis.call('HMGET', k, 'a')
    local newest = tonumber(st[1]) or 0
    local sw = at - fmod(at, p.step)
    if p.anch == 1 then sw = at - fmod(at - newest, p.step) end
    local c = tonumber(redis.call('HGET', k, fmt(sw)))
    if not c then return end
    local take = math.min(c, n)
    if take == c then redis.call('HDEL', k, fmt(sw)) else redis.call('HINCRBY', k, fmt(sw), -take) end
    redis.call('HINCRBY', k, 's', -take)
  elseif p.alg == 2 then -- log: take n off the pair stamped at
    local len = redis.call('LLEN', lk)
    for i = len - 1, 0, -1 do
      local e = redis.call('LINDEX', lk, i)
      local sp = string.find(e, ' ', 1, true)
      local t, c = tonumber(string.sub(e, 1, sp - 1)), tonumber(string.sub(e, sp + 1))
      if t < at then return end
      if t == at then
        local take = math.min(c, n)
        if take == c then
          redis.call('LSET', lk, i, 'x')
          redis.call('LREM', lk, 1, 'x')
        else
          redis.call('LSET', lk, i, fmt(t) .. ' ' .. fmt(c - take))
        end
        redis.call('HINCRBY', k, 's', -take)
        return
      end
    end
  else -- buckets: move the TAT back by n emission intervals
    local v = redis.call('GET', k)
    local bfp = bucket_fp(p)
    if not v or string.sub(v, 25) ~= bfp then return end
    local tat, frac, c = struct.unpack('<ddd', v) -- see bucket.lua
    if c ~= z then return end
    local g = frac - n * p.el
    if g < 0 then
      local borrow = cdiv(-g, p.rl)
      tat, g = tat - borrow, g + borrow * p.rl
    end
    redis.call('SET', k, struct.pack('<ddd', tat, g, z) .. bfp, 'KEEPTTL')
  end
end

refund()
return deciders[p.alg](k, lk, p, at, 0, false)
