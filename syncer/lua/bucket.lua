-- Token bucket, leaky bucket (meter) and GCRA: one formulation. State (hash
-- KEYS[1]): a = TAT in whole µs, b = its fraction in units of 1/rl µs, fp,
-- z = how many admissions found the bucket full (its TAT in the past): a
-- refund checks it did not change, or it would hand back tokens that the
-- refill had already made up.
local function decide_bucket(k, _, p, now, n, commit)
  local st = redis.call('HMGET', k, 'a', 'b', 'fp', 'z')
  local tat, frac, z = tonumber(st[1]) or 0, tonumber(st[2]) or 0, tonumber(st[4]) or 0
  if st[3] and st[3] ~= p.fp then -- the limit changed: keep the tokens
    local o = parse_fp(st[3])
    if o.alg < 4 or tat < now or (tat == now and frac == 0) then -- a window algorithm, or nothing pending
      tat, frac = 0, 0
    else
      local tokens = o.burst
      if tat - now > cdiv(o.tau, o.rl) then
        tokens = 0
      elseif tat > now or (tat == now and frac > 0) then
        tokens = fdiv(math.max(o.tau - ((tat - now) * o.rl + frac), 0), o.el)
      end
      local f = (p.burst - math.min(tokens, p.burst)) * p.el
      tat, frac = now + fdiv(f, p.rl), fmod(f, p.rl)
    end
    redis.call('HSET', k, 'a', fmt(tat), 'b', fmt(frac), 'fp', p.fp)
    expire(k, tat - now)
  end
  local rl, el, tau = p.rl, p.el, p.tau
  local full = tat < now
  if full then
    tat, frac = now, 0
  else
    local early = tat - cdiv(tau, rl)
    if now < early then now = early end -- time ran back before any stored time
  end
  local dl = (tat - now) * rl + frac -- (TAT - now) * rl
  local need = n * el
  if dl + need > tau then
    return {1, fdiv(math.max(tau - dl, 0), el), cdiv(dl, rl), cdiv(dl + need - tau, rl), now, z}
  end
  dl = dl + need
  if commit and n > 0 then
    local f = frac + need
    local a = tat + fdiv(f, rl)
    if full then z = z + 1 end
    redis.call('HSET', k, 'a', fmt(a), 'b', fmt(fmod(f, rl)), 'fp', p.fp, 'z', fmt(z))
    expire(k, a - now + 1)
  end
  return {0, fdiv(tau - dl, el), cdiv(dl, rl), 0, now, z}
end
