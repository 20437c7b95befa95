-- Rate-share leases (token bucket, leaky bucket, GCRA) for the hybrid mode.
--
-- The bucket refills L tokens per W and holds at most B. Node i holds a
-- share of it: it refills locally at l_i per W into a bucket of capacity
-- b_i, until its lease's expiry x_i. Redis keeps the rest as a pool, refilled
-- at the rate nobody holds, L - sum(l), up to B - sum(b); tokens a node gains
-- when its share grows come out of the pool. Tokens are thus conserved:
-- admitted over any interval stays within B + (L/W) * interval. Shares
-- leave the pool a floor of rate and capacity, for the nodes without one.
--
-- A share that shrinks stays committed (counted as held) until the old
-- lease's expiry: the node may go on using it until it hears of the change,
-- so nobody else gets it before then. Nodes stop using a share at its expiry,
-- by Redis's clock.
--
-- KEYS[1] meta hash: fp, ep (epoch), pool (pt tokens, pr remainder in units
-- of 1/W token, pn time), and per node: l, b, x (share and expiry), ol, ob,
-- ox (an old, larger share still committed until ox), d, t (demand per W and
-- when reported), q (the last sequence number applied).
-- ARGV: [1] now ('' for Redis's clock), [2] node, [3] sequence number, [4]
-- flags (1: release), [5] demand (requests per W; -1: unknown), [6] the node's tokens
-- now (on a release: the tokens it hands back), [7] debt (tokens it admitted without a share, applied once per
-- sequence number), [8] lease TTL (us), [9] demand TTL (us), [10..12] the
-- share the node holds (rate, burst, expiry): a node sends a request only
-- once it applied the last reply, so this is what it may be using until
-- the reply to this one, [13] the live nodes of the cluster (the
-- registry's count), [14] the horizon a lease is sized for (us), [15] the
-- node's allowance (a demand over a horizon within it gets no share),
-- [16..] the rule's parameters.
--
-- Returns {now, epoch, l, b, expiry, tokens granted, pool tokens, pool rate,
-- pool capacity, revoked, live nodes}.
local now = clock(ARGV[1])
local node, seq, flags = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local demand, tokens, debt = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local lease_ttl, demand_ttl = tonumber(ARGV[8]), tonumber(ARGV[9])
local held_l, held_b, held_x = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local cluster, horizon, quiet = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
local p = params(16)
local W, L, B = p.w, p.L, p.burst
local m = KEYS[1]

-- The key is the central mode's too: a rule that ran central holds a string
-- here (a bucket's state), which starts afresh.
local all = redis.pcall('HGETALL', m)
if all.err then
  other_family(all, m)
  all = {}
end
local f = {}
for i = 1, #all, 2 do f[all[i]] = all[i + 1] end
local function num(k) return tonumber(f[k]) or 0 end

local revoked = 0
if f.fp and f.fp ~= p.fp and not bucket_alg(tonumber(string.match(f.fp, '^(%d+)'))) then
  f = {} -- another family's state under this name: start afresh
  redis.call('DEL', m)
end
local ep = tonumber(f.ep)
if not ep then
  ep = now
  f = {ep = fmt(now), fp = p.fp, pt = fmt(B), pr = '0', pn = fmt(now)}
end

-- The nodes, and what each holds committed.
local nodes = {}
for k, _ in pairs(f) do
  local id = string.match(k, '^t%.(.+)$') or string.match(k, '^x%.(.+)$') or string.match(k, '^ox%.(.+)$')
  if id then nodes[id] = true end
end
nodes[node] = true
local function committed(id)
  local l, b = num('l.' .. id), num('b.' .. id)
  if num('ox.' .. id) >= now then
    l, b = math.max(l, num('ol.' .. id)), math.max(b, num('ob.' .. id))
  end
  return l, b
end
local function sums()
  local cl, cb = 0, 0
  for id, _ in pairs(nodes) do
    local l, b = committed(id)
    cl, cb = cl + l, cb + b
  end
  return cl, cb
end

-- Refill the pool up to now at the rate nobody held since its last update.
-- Commitments that expired in between are still counted: the pool refills
-- no faster than it may.
local pt, pr, pn = num('pt'), num('pr'), num('pn')
local cl, cb = sums()
local prate, pcap = L - cl, B - cb
if now > pn and prate > 0 and pt < pcap then
  local elapsed = math.min(now - pn, cdiv((pcap - pt) * W - pr, prate))
  local n = pr + elapsed * prate
  local add = fdiv(n, W)
  pt, pr = pt + add, n - add * W
  if pt >= pcap then pt, pr = pcap, 0 end
end
pn = math.max(pn, now)

if f.fp ~= p.fp then
  -- The limit changed: every share is revoked; what was held stays
  -- committed until its expiry.
  revoked = 1
  for id, _ in pairs(nodes) do
    local l, b = num('l.' .. id), num('b.' .. id)
    if l > 0 or b > 0 then
      f['ol.' .. id], f['ob.' .. id] = fmt(math.max(l, num('ol.' .. id))), fmt(math.max(b, num('ob.' .. id)))
      f['ox.' .. id] = fmt(math.max(num('x.' .. id), num('ox.' .. id)))
    end
    f['l.' .. id], f['b.' .. id] = '0', '0'
  end
  f.fp = p.fp
end

-- Expired leases hold nothing.
for id, _ in pairs(nodes) do
  if num('x.' .. id) < now then f['l.' .. id], f['b.' .. id] = '0', '0' end
  if num('ox.' .. id) < now then f['ol.' .. id], f['ob.' .. id], f['ox.' .. id] = nil, nil, nil end
end

-- Debt, once per sequence number: tokens the node admitted without a
-- share (its allowance) come out of the pool; a node releasing its share
-- hands its tokens back to it (capped below at the pool's capacity).
if seq > num('q.' .. node) then
  pt = pt - debt
  if flags % 2 == 1 then pt = pt + tokens end
  f['q.' .. node] = fmt(seq)
end

-- Demand: the node's share follows its part of the live demand. A demand
-- of -1 is unknown: the node's first exchange of a new key came too soon
-- after its first request to measure one. It counts as the average of the
-- demands known (all alike when none is), and the node gets a quarter of
-- that share (guess) until its next exchange measures it.
local guess = demand < 0
f['d.' .. node], f['t.' .. node] = fmt(demand), fmt(now)
local live = 0
local demands = {} -- the live nodes' demands, -1 where unknown
for id, _ in pairs(nodes) do
  if num('t.' .. id) + demand_ttl >= now then
    live = live + 1
    demands[id] = num('d.' .. id)
  else
    f['d.' .. id], f['t.' .. id] = nil, nil
  end
end
local total, _, avg = demand_total(demands, 1)
if guess then demand = avg end
local lt, bt = 0, 0
-- A quiet node, whose demand over a horizon fits in its allowance, gets no
-- share: it admits as debt, against the pool, which it reports at its next
-- round. A share filled from the pool would sit in its bucket, mostly
-- unused, and leave the pool short for the next node the key reaches.
if flags % 2 == 0 and demand > 0 and total > 0 and (guess or cdiv(demand * horizon, W) > quiet) then
  -- A new key's burst reaches every node at once, and they ask one after
  -- the other: in the key's first DemandTTL, each node of the cluster yet
  -- to ask is assumed to want the average, so that the first to ask does
  -- not take the whole rate and burst while the others starve. (A node
  -- short of tokens still draws on the pool, up to its burst share, at
  -- each exchange.)
  if live < cluster and now - ep < demand_ttl then total = total * cluster / live end
  lt = math.max(math.floor(L * demand / total), 1)
  bt = math.max(math.floor(B * demand / total), 1)
  if guess then
    lt, bt = math.max(math.floor(lt / 4), 1), math.max(math.floor(bt / 4), 1)
  else
    -- Demand estimates are noisy: a share moves only when its target is
    -- off by more than a sixteenth. Every shrink keeps the old share
    -- committed until its expiry, idle for everyone; churn would waste
    -- capacity.
    local hl, hb = num('l.' .. node), num('b.' .. node)
    if math.abs(lt - hl) <= hl / 16 then lt = hl end
    if math.abs(bt - hb) <= hb / 16 then bt = hb end
  end
end

-- What the others hold bounds what the node may have.
local ocl, ocb = 0, 0
for id, _ in pairs(nodes) do
  if id ~= node then
    local l, b = committed(id)
    ocl, ocb = ocl + l, ocb + b
  end
end
-- Shares leave the pool a floor, for the nodes without one: a quiet node
-- admits against the pool, and one whose last reply saw every token held
-- would refuse until its next exchange, long after the shares have gone.
-- The floor is a node's allowance of the burst, at most its part (B ÷
-- nodes), refilled in half the time the bucket takes to fill, but no more
-- than once per horizon: the nodes with shares draw what the pool holds
-- only at their exchanges, and a pool full between them would lose rate.
local fb, fl = 0, 0
if cluster > 1 and quiet > 0 then
  fb = math.min(quiet, math.floor(B / cluster))
  if fb > 0 then fl = math.max(math.min(math.floor(2 * L * fb / B), math.floor(fb * W / math.max(horizon, 1))), 1) end
end
local l, b = math.max(math.min(lt, L - ocl - fl), 0), math.max(math.min(bt, B - ocb - fb), 0)
-- Shrinking: what the node holds stays committed until its expiry, as the
-- node uses it until it hears of this reply. (It applied every earlier
-- reply before sending this request: older commitments are over.)
f['ol.' .. node], f['ob.' .. node], f['ox.' .. node] = nil, nil, nil
held_l, held_b = math.min(held_l, L), math.min(held_b, B) -- a changed limit: no more than it now allows
if (l < held_l or b < held_b) and held_x >= now then
  f['ol.' .. node], f['ob.' .. node], f['ox.' .. node] = fmt(held_l), fmt(held_b), fmt(held_x)
end
local x = now
if l > 0 or b > 0 then x = now + lease_ttl end
f['l.' .. node], f['b.' .. node], f['x.' .. node] = fmt(l), fmt(b), fmt(x)

-- Tokens for the node's share, from the pool; then the pool holds what
-- nobody holds, and tokens beyond its new capacity go. (In this order: the
-- capacity a grown share takes from the pool comes with its tokens.)
local grant = 0
if b > tokens and pt > 0 then
  grant = math.min(b - tokens, pt)
  pt = pt - grant
end
cl, cb = sums()
prate, pcap = L - cl, B - cb
if pt > pcap then pt, pr = pcap, 0 end
f.pt, f.pr, f.pn = fmt(pt), fmt(pr), fmt(pn)

redis.call('DEL', m)
local args = {}
for k, v in pairs(f) do
  args[#args + 1] = k
  args[#args + 1] = v
end
redis.call('HSET', m, unpack(args))
-- The state lives while a lease or a demand may matter, and until the pool
-- would be full again.
local refill = 0
if prate > 0 and pt < pcap then refill = cdiv((pcap - pt) * W, prate) end
expire(m, math.max(lease_ttl, demand_ttl, refill))

return {now, ep, l, b, x, grant, pt, prate, pcap, revoked, live}
