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
-- KEYS[1] hash: fp (the rule's fingerprint, as text), h (the epoch and the
-- pool: ep, pt tokens, pr remainder in units of 1/W token, pn time) and, per
-- node, n.<node>: l, b, x (share and expiry), d, t (demand per W and when
-- reported), q (the last sequence number applied), then, while it holds
-- one, ol, ob, ox (an old, larger share still committed until ox). h and
-- n.<node> are little-endian doubles (struct's '<d'; each an integer below
-- 2^53, so exact): a few packed fields cost Redis a fraction of what nine
-- text numbers per node cost to parse and format. A field without a
-- commitment, 48 bytes, keeps the hash in Redis's compact encoding (values
-- up to 64 bytes). A hash without h (another layout) starts afresh, under a
-- new epoch.
-- ARGV: [1] now ('' for Redis's clock), [2] node, [3] the rule's
-- fingerprint, [4] numbers packed as little-endian doubles (each an integer
-- below 2^53, so exact; one argument costs Redis less than many to pass and
-- parse): the sequence number, flags (1: release), demand (requests per W;
-- -1: unknown), the node's tokens now (on a release: the tokens it hands
-- back), debt (tokens it admitted without a share, applied once per
-- sequence number), lease TTL (us), demand TTL (us), the share the node
-- holds (rate, burst, expiry: a node sends a request only once it applied
-- the last reply, so this is what it may be using until the reply to this
-- one), the live nodes of the cluster (the registry's count), the horizon a
-- lease is sized for (us), the node's allowance (a demand over a horizon
-- within it gets no share), the tokens requests waiting for this exchange
-- need (a share's burst is at least that, as the pool allows; a node with
-- no share gets them prepaid), the prepaid tokens the node hands back
-- unused (applied once per sequence number, as debt), then the rule's ten
-- numbers (see params.lua).
--
-- Returns {now, epoch, l, b, expiry, tokens granted (prepaid when b is 0), pool tokens, pool rate,
-- pool capacity, revoked, live nodes, rationed (1 when the live nodes'
-- demand reaches the rate: the shares ration it)}.
local now = clock(ARGV[1])
local node, pfp = ARGV[2], ARGV[3]
-- Of the rule's numbers, L, W and B.
local seq, flags, demand, tokens, debt, lease_ttl, demand_ttl, held_l, held_b, held_x,
  cluster, horizon, quiet, want, ret, _, L, W, B = struct.unpack('<ddddddddddddddddddd', ARGV[4])
local m, me = KEYS[1], 'n.' .. node
local max, min, floor = math.max, math.min, math.floor
-- A node's field: l, b, x, d, t, q, and ol, ob, ox unless all three are 0.
local SHORT, LONG = '<dddddd', '<ddddddddd'
local function pack_node(l, b, x, ol, ob, ox, d, t, q)
  if ol == 0 and ob == 0 and ox == 0 then return struct.pack(SHORT, l, b, x, d, t, q) end
  return struct.pack(LONG, l, b, x, d, t, q, ol, ob, ox)
end

-- committed is what a node holding the share l, b and the old one ol, ob
-- until ox has committed: the larger of the two until ox.
local function committed(l, b, ol, ob, ox)
  if ox >= now then return max(l, ol), max(b, ob) end
  return l, b
end

-- The key is the central mode's too: a rule that ran central holds a string
-- here (a bucket's state), which starts afresh.
local all = redis.pcall('HGETALL', m)
if all.err then
  other_family(all, m)
  all = {}
end
local fp, h
local recs = {} -- n.<node> -> its packed numbers
for i = 1, #all, 2 do
  local k = all[i]
  if k == 'h' then
    h = all[i + 1]
  elseif k == 'fp' then
    fp = all[i + 1]
  else
    recs[k] = all[i + 1]
  end
end

local ep, pt, pr, pn
if (fp and fp ~= pfp and not bucket_alg(tonumber(string.match(fp, '^(%d+)')))) or not h then
  -- Nothing, another family's state under this name or another layout:
  -- start afresh.
  if #all > 0 then redis.call('DEL', m) end
  ep, pt, pr, pn, fp, recs = now, B, 0, now, nil, {}
else
  ep, pt, pr, pn = struct.unpack('<dddd', h)
end
-- The limit changed: every share is revoked; what was held stays committed
-- until its expiry.
local revoked = 0
if fp and fp ~= pfp then revoked = 1 end
if not recs[me] then recs[me] = pack_node(0, 0, 0, 0, 0, 0, 0, 0, 0) end

-- One pass over the nodes. cl, cb: what all hold committed, expired
-- commitments still counted (the pool refills no faster than it may); then
-- the revocation and expiries; ocl, ocb: what the others hold committed
-- after them; the live demands.
local cl, cb, ocl, ocb = 0, 0, 0, 0
local live, known, dsum = 0, 0, 0
local hl, hb, hq, hd, ht -- the node's share after expiries, last sequence number, demand
local writes = {}
for k, v in pairs(recs) do
  local l, b, x, d, t, q, ol, ob, ox
  if #v == 48 then
    l, b, x, d, t, q = struct.unpack(SHORT, v)
    ol, ob, ox = 0, 0, 0
  else
    l, b, x, d, t, q, ol, ob, ox = struct.unpack(LONG, v)
  end
  local cl1, cb1 = committed(l, b, ol, ob, ox)
  cl, cb = cl + cl1, cb + cb1
  local dirty = revoked == 1
  if dirty then
    if l > 0 or b > 0 then ol, ob, ox = max(l, ol), max(b, ob), max(x, ox) end
    l, b = 0, 0
  end
  -- Expired leases hold nothing.
  if x < now and (l ~= 0 or b ~= 0) then l, b, dirty = 0, 0, true end
  if ox < now and (ol ~= 0 or ob ~= 0 or ox ~= 0) then ol, ob, ox, dirty = 0, 0, 0, true end
  if k == me then
    hl, hb, hq, d, t = l, b, q, demand, now
  end
  if t + demand_ttl >= now then
    live = live + 1
    if d >= 0 then known, dsum = known + 1, dsum + d end
  elseif d ~= 0 or t ~= 0 then
    d, t, dirty = 0, 0, true
  end
  if k == me then
    hd, ht = d, t
  else
    cl1, cb1 = committed(l, b, ol, ob, ox)
    ocl, ocb = ocl + cl1, ocb + cb1
    if dirty then
      writes[#writes + 1] = k
      writes[#writes + 1] = pack_node(l, b, x, ol, ob, ox, d, t, q)
    end
  end
end

-- Refill the pool up to now at the rate nobody held since its last update.
local prate, pcap = L - cl, B - cb
if now > pn and prate > 0 and pt < pcap then
  local elapsed = min(now - pn, cdiv((pcap - pt) * W - pr, prate))
  local n = pr + elapsed * prate
  local add = fdiv(n, W)
  pt, pr = pt + add, n - add * W
  if pt >= pcap then pt, pr = pcap, 0 end
end
pn = max(pn, now)

-- Debt, once per sequence number: tokens the node admitted without a
-- share (its allowance) come out of the pool; a node releasing its share
-- hands its tokens back to it, and one holding prepaid tokens it did not
-- use hands those back (capped below at the pool's capacity).
if seq > hq then
  pt = pt - debt + ret
  if flags % 2 == 1 then pt = pt + tokens end
  hq = seq
end

-- Demand: the node's share follows its part of the live demand. A demand
-- of -1 is unknown: the node's first exchange of a new key came too soon
-- after its first request to measure one. It counts as the average of the
-- demands known (all alike when none is), and the node gets a quarter of
-- that share (guess) until its next exchange measures it. (As
-- demand_total, over the live nodes.)
local guess = demand < 0
local avg = 1
if known > 0 then avg = dsum / known end
local total = dsum + (live - known) * avg
if guess then demand = avg end
local lt, bt = 0, 0
-- A quiet node, whose demand over a horizon fits in its allowance, gets no
-- share: it admits as debt, against the pool, which it reports at its next
-- round. A share filled from the pool would sit in its bucket, mostly
-- unused, and leave the pool short for the next node the key reaches.
-- A node that holds a share keeps one until its demand falls to half the
-- quiet level: a demand near it, measured noisily, would give and take the
-- share at every exchange, and each time lose the part of a token the
-- node's bucket had refilled.
local busy = cdiv(demand * horizon, W) > quiet
if hl > 0 and not busy then busy = cdiv(2 * demand * horizon, W) > quiet end
if flags % 2 == 0 and demand > 0 and total > 0 and (guess or busy) then
  -- A new key's burst reaches every node at once, and they ask one after
  -- the other: in the key's first DemandTTL, each node of the cluster yet
  -- to ask is assumed to want the average, so that the first to ask does
  -- not take the whole rate and burst while the others starve. (A node
  -- short of tokens still draws on the pool, up to its burst share, at
  -- each exchange.)
  if live < cluster and now - ep < demand_ttl then total = total * cluster / live end
  lt = max(floor(L * demand / total), 1)
  bt = max(floor(B * demand / total), 1)
  if guess then
    lt, bt = max(floor(lt / 4), 1), max(floor(bt / 4), 1)
  else
    -- Demand estimates are noisy: a share moves only when its target is
    -- off by more than a sixteenth. Every shrink keeps the old share
    -- committed until its expiry, idle for everyone; churn would waste
    -- capacity.
    if math.abs(lt - hl) <= hl / 16 then lt = hl end
    if math.abs(bt - hb) <= hb / 16 then bt = hb end
  end
end
-- Requests wait on the node for this exchange: a share's burst holds them,
-- as the pool allows (below), whatever its demand says. (A node given no
-- share gets them prepaid, below: a burst without a rate would hold
-- capacity nothing refills.)
if flags % 2 == 0 and lt > 0 and want > bt then bt = min(want, B) end

-- What the others hold bounds what the node may have.
-- Shares leave the pool a floor, for the nodes without one: a quiet node
-- admits against the pool, and one whose last reply saw every token held
-- would refuse until its next exchange, long after the shares have gone.
-- The floor is a node's allowance of the burst, at most its part (B ÷
-- nodes), refilled in half the time the bucket takes to fill, but no more
-- than once per horizon: the nodes with shares draw what the pool holds
-- only at their exchanges, and a pool full between them would lose rate.
local fb, fl = 0, 0
if cluster > 1 and quiet > 0 then
  fb = min(quiet, floor(B / cluster))
  if fb > 0 then fl = max(min(floor(2 * L * fb / B), floor(fb * W / max(horizon, 1))), 1) end
end
local l, b = max(min(lt, L - ocl - fl), 0), max(min(bt, B - ocb - fb), 0)
-- A share with a burst and no rate would hold capacity nothing refills:
-- the node draws on the pool instead, as one without a share.
if l == 0 then b = 0 end
-- Shrinking: what the node holds stays committed until its expiry, as the
-- node uses it until it hears of this reply. (It applied every earlier
-- reply before sending this request: older commitments are over.)
local ol, ob, ox = 0, 0, 0
held_l, held_b = min(held_l, L), min(held_b, B) -- a changed limit: no more than it now allows
if (l < held_l or b < held_b) and held_x >= now then ol, ob, ox = held_l, held_b, held_x end
local x = now
if l > 0 or b > 0 then x = now + lease_ttl end

-- Tokens for the node's share, from the pool; then the pool holds what
-- nobody holds, and tokens beyond its new capacity go. (In this order: the
-- capacity a grown share takes from the pool comes with its tokens.)
local grant = 0
if b > tokens and pt > 0 then
  grant = min(b - tokens, pt)
  pt = pt - grant
elseif b == 0 and flags % 2 == 0 and want > 0 and pt > 0 then
  -- No share: the tokens the waiting requests need, prepaid out of the
  -- pool, for the node to admit them with.
  grant = min(want, pt)
  pt = pt - grant
end
cl, cb = committed(l, b, ol, ob, ox)
cl, cb = ocl + cl, ocb + cb
prate, pcap = L - cl, B - cb
if pt > pcap then pt, pr = pcap, 0 end

-- Only what changed is written: the pool, this node, the nodes whose
-- leases, commitments or demands ended, and a new fingerprint.
if fp ~= pfp then
  writes[#writes + 1] = 'fp'
  writes[#writes + 1] = pfp
end
redis.call('HSET', m, 'h', struct.pack('<dddd', ep, pt, pr, pn), me,
  pack_node(l, b, x, ol, ob, ox, hd, ht, hq), unpack(writes))
-- The state lives while a lease or a demand may matter, and until the pool
-- would be full again.
local refill = 0
if prate > 0 and pt < pcap then refill = cdiv((pcap - pt) * W, prate) end
expire(m, max(lease_ttl, demand_ttl, refill))

local rationed = 0
if total >= L then rationed = 1 end
return {now, ep, l, b, x, grant, pt, prate, pcap, revoked, live, rationed}
