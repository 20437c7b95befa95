-- Sub-window counter. State (hash KEYS[1]): a = start of the newest
-- sub-window counted, s = the total the sub-windows' fields hold, fp, and a
-- field per sub-window with requests, named by its start, holding its
-- count. An admission removes the fields of sub-windows that left the
-- window, as local's ring drops its expired pairs.
local function decide_sub(k, _, p, now, n, commit)
  local st = redis.pcall('HGETALL', k)
  if st.err then
    other_family(st, k)
    st = {}
  end
  local h, subs = {}, {}
  for i = 1, #st, 2 do
    local t = tonumber(st[i])
    if t then subs[#subs + 1] = {t, tonumber(st[i + 1])} else h[st[i]] = st[i + 1] end
  end
  table.sort(subs, function(x, y) return x[1] < y[1] end)
  local newest, sum = tonumber(h.a) or 0, tonumber(h.s) or 0
  if h.fp and h.fp ~= p.fp then
    local o = parse_fp(h.fp)
    -- Counts are kept under another limit on the same sub-windows; anything
    -- else, or nothing pending, starts afresh.
    if o.alg ~= p.alg or sum == 0 or now >= newest + o.w or o.w ~= p.w or o.step ~= p.step or o.anch ~= p.anch then
      newest, sum, subs = 0, 0, {}
      redis.call('DEL', k)
    end
    redis.call('HSET', k, 'a', fmt(newest), 's', fmt(sum), 'fp', p.fp)
    expire(k, newest + p.w - now)
  end
  if now < newest then now = newest end
  local L, w, step = p.L, p.w, p.step
  local start
  if p.anch == 0 then
    start = now - fmod(now, step)
  elseif sum == 0 or now >= newest + w then
    start = now -- nothing in the window: a new one starts here
  else
    start = now - fmod(now - newest, step) -- on the grid of the newest sub-window
  end
  local cut = start - w -- the window is (start - w, start]
  local expired, expired_sum = 0, 0
  for _, e in ipairs(subs) do
    if e[1] > cut then break end
    expired, expired_sum = expired + 1, expired_sum + e[2]
  end
  local count = sum - expired_sum
  if count + n > L then
    -- Free enough by letting the oldest sub-windows leave the window.
    local need, acc, at = count + n - L, 0, nil
    for i = expired + 1, #subs do
      acc = acc + subs[i][2]
      if acc >= need then at = subs[i][1] break end
    end
    return {1, math.max(L - count, 0), newest + w - now, at + w - now, now, 0}
  end
  count = count + n
  local last = newest
  if n > 0 then
    last = start
    if commit then
      for i = 1, expired do redis.call('HDEL', k, fmt(subs[i][1])) end
      redis.call('HINCRBY', k, fmt(start), n)
      redis.call('HSET', k, 'a', fmt(start), 's', fmt(count), 'fp', p.fp)
      expire(k, start + w - now)
    end
  end
  local reset = 0
  if count > 0 then reset = last + w - now end
  return {0, L - count, reset, 0, now, 0}
end
