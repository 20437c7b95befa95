-- Sliding window log. State: hash KEYS[1] (a = newest time stored, s = cost
-- held, fp) and list KEYS[2] of "time cost" pairs, oldest first; requests
-- in the same microsecond share a pair.
local function log_pair(e)
  local sp = string.find(e, ' ', 1, true)
  return tonumber(string.sub(e, 1, sp - 1)), tonumber(string.sub(e, sp + 1))
end

local function decide_log(k, lk, p, now, n, commit)
  local st = redis.pcall('HMGET', k, 'a', 's', 'fp')
  if st.err then
    other_family(st, k, lk)
    st = {}
  end
  -- A new state has an empty log: a bucket's state, since expired, may have
  -- replaced the log's state without its list.
  if not st[3] and commit and n > 0 then redis.call('DEL', lk) end
  local newest, sum = tonumber(st[1]) or 0, tonumber(st[2]) or 0
  if st[3] and st[3] ~= p.fp then
    local o = parse_fp(st[3])
    if o.alg ~= p.alg or sum == 0 or now >= newest + o.w then -- another algorithm, or nothing pending
      newest, sum = 0, 0
      redis.call('DEL', lk)
    end
    -- The log reads the same under any limit.
    redis.call('HSET', k, 'a', fmt(newest), 's', fmt(sum), 'fp', p.fp)
    expire(k, newest + p.w - now)
  end
  if now < newest then now = newest end
  local L, w = p.L, p.w
  local cut = now - w -- the window is (now - w, now]
  -- Pairs at or before cut have left the window: count them from the head.
  local expired, expired_sum, len = 0, 0, 0
  if sum > 0 then len = redis.call('LLEN', lk) end
  local done = false
  while not done and expired < len do
    local chunk = redis.call('LRANGE', lk, expired, expired + 31)
    for _, e in ipairs(chunk) do
      local t, c = log_pair(e)
      if t > cut then done = true break end
      expired, expired_sum = expired + 1, expired_sum + c
    end
    if #chunk == 0 then break end
  end
  local count = sum - expired_sum
  if count + n > L then
    -- Free enough by letting the oldest pairs leave the window.
    local need, acc, i, at = count + n - L, 0, expired, nil
    while at == nil and i < len do
      local chunk = redis.call('LRANGE', lk, i, i + 31)
      for _, e in ipairs(chunk) do
        local t, c = log_pair(e)
        acc = acc + c
        if acc >= need then at = t break end
      end
      i = i + #chunk
      if #chunk == 0 then break end
    end
    return {1, math.max(L - count, 0), newest + w - now, at + w - now, now, 0}
  end
  count = count + n
  local last = newest
  if n > 0 then
    last = now
    if commit then
      if expired > 0 then redis.call('LTRIM', lk, expired, -1) end
      local tail = redis.call('LINDEX', lk, -1)
      local merged = false
      if tail then
        local t, c = log_pair(tail)
        if t == now then
          redis.call('LSET', lk, -1, fmt(now) .. ' ' .. fmt(c + n))
          merged = true
        end
      end
      if not merged then redis.call('RPUSH', lk, fmt(now) .. ' ' .. fmt(n)) end
      redis.call('HSET', k, 'a', fmt(now), 's', fmt(count), 'fp', p.fp)
      expire(k, w)
      expire(lk, w)
    end
  end
  local reset = 0
  if count > 0 then reset = last + w - now end
  return {0, L - count, reset, 0, now, 0}
end
