-- Fixed window. State (hash KEYS[1]): a = window start, b = count, fp.
-- Anchored (p.anch 1), a window starts at the first request after the
-- last one ended.
local function decide_fixed(k, _, p, now, n, commit)
  local st = redis.pcall('HMGET', k, 'a', 'b', 'fp')
  if st.err then
    other_family(st, k)
    st = {}
  end
  local start, count = tonumber(st[1]) or 0, tonumber(st[2]) or 0
  if st[3] and st[3] ~= p.fp then -- the limit changed: keep the count
    local o = parse_fp(st[3])
    if o.alg ~= p.alg or count == 0 or now >= start + o.w then -- another algorithm, or nothing pending
      start, count = 0, 0
    else
      local t = math.max(now, start) -- time ran back: the window stored is the current one
      if t >= start + o.w then count = 0 end
      if p.anch == 0 then start = t - fmod(t, p.w) end -- an anchored window keeps its start
      count = math.min(count, p.L)
    end
    redis.call('HSET', k, 'a', fmt(start), 'b', fmt(count), 'fp', p.fp)
    expire(k, start + p.w - now)
  end
  local w, L = p.w, p.L
  if now >= start + w or (p.anch == 1 and count == 0) then
    start, count = now - fmod(now, w), 0
    if p.anch == 1 then start = now end
  elseif now < start then
    now = start
  end
  if count + n > L then
    local reset = start + w - now
    return {1, L - count, reset, reset, now, 0}
  end
  count = count + n
  if commit and n > 0 then
    redis.call('HSET', k, 'a', fmt(start), 'b', fmt(count), 'fp', p.fp)
    expire(k, start + w - now)
  end
  local reset = 0
  if count > 0 then reset = start + w - now end
  return {0, L - count, reset, 0, now, 0}
end
