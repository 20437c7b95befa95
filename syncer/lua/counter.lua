-- Sliding window counter. State (hash KEYS[1]): a = current window start,
-- b = its count, c = the previous window's count, fp.
local function counter_reset(start, cur, prev, now, w)
  if cur > 0 then return start + 2 * w - now end
  if prev > 0 then return start + w - now end
  return 0
end

local function decide_counter(k, _, p, now, n, commit)
  local st = redis.pcall('HMGET', k, 'a', 'b', 'c', 'fp')
  if st.err then
    other_family(st, k)
    st = {}
  end
  local start, cur, prev = tonumber(st[1]) or 0, tonumber(st[2]) or 0, tonumber(st[3]) or 0
  if st[4] and st[4] ~= p.fp then -- the limit changed: keep the counts
    local o = parse_fp(st[4])
    local initial = (cur == 0 and prev == 0) or now >= start + 2 * o.w or (cur == 0 and now >= start + o.w)
    if o.alg ~= p.alg or initial then -- another algorithm, or nothing pending
      start, cur, prev = 0, 0, 0
    elseif o.w ~= p.w then
      local t = math.max(now, start)
      if t >= start + o.w then cur = 0 end
      start, prev = t - fmod(t, p.w), 0
    end
    cur, prev = math.min(cur, p.L), math.min(prev, p.L)
    redis.call('HSET', k, 'a', fmt(start), 'b', fmt(cur), 'c', fmt(prev), 'fp', p.fp)
    expire(k, start + 2 * p.w - now)
  end
  local w, L, ws, step = p.w, p.L, p.ws, p.step
  if now >= start + w then
    local nxt = now - fmod(now, w)
    if nxt == start + w then prev = cur else prev = 0 end
    start, cur = nxt, 0
  elseif now < start then
    now = start
  end
  local left = ws - fdiv(now - start, step)
  -- estimate + n <= limit, estimate = prev * left / ws + cur, cross-multiplied
  if cur + n <= L and prev * left <= (L - cur - n) * ws then
    cur = cur + n
    if commit and n > 0 then
      redis.call('HSET', k, 'a', fmt(start), 'b', fmt(cur), 'c', fmt(prev), 'fp', p.fp)
      expire(k, start + 2 * w - now)
    end
    return {0, fdiv(L * ws - prev * left - cur * ws, ws), counter_reset(start, cur, prev, now, w), 0, now, 0}
  end
  local remaining = 0
  local room = L * ws - prev * left - cur * ws
  if room > 0 then remaining = fdiv(room, ws) end
  local at
  if cur + n <= L then
    at = start + (ws - fdiv((L - cur - n) * ws, prev)) * step
  else
    at = start + w + (ws - fdiv((L - n) * ws, cur)) * step
  end
  return {1, remaining, counter_reset(start, cur, prev, now, w), at - now, now, 0}
end
