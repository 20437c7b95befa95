-- Window leases (fixed window, sliding window counter, sub-window counter)
-- for the hybrid mode.
--
-- A node decides locally against a lease: a count it may admit in one
-- window. Redis keeps, per window, what each node was granted (g) and what it
-- reported it used (u), and R = sum over nodes of max(g, u): the window's
-- budget committed. Grants never take R past the budget, so leases
-- outstanding never sum past the limit; used beyond a grant (the cold-start
-- allowance) is debt that counts the same way.
--
-- Reports are absolute (what a node used in a window, in total), and so are
-- the targets it asks for: a retried sync changes nothing.
--
-- KEYS[1] the key's state, a string of seven values packed with cmsgpack,
-- read with one GET and written with one SET ... PX: fp (the rule's
-- fingerprint), ep (the epoch), n, the nodes' demands as two tables keyed by
-- node, {d, t} (requests per window, and when it reported them), h, the sub-window
-- counter's history (below), and the three window slots, window x in slot
-- (x / W) mod 3, each {x, R, g, u} (per node: granted, reported used), or
-- nil: the previous, current and next windows. KEYS[2..4] held the slots in
-- an earlier layout, a hash each, beside a hash at KEYS[1]: a state in that
-- layout is deleted and starts afresh under a new epoch.
-- ARGV: [1] now ('' for Redis's clock), [2] node, [3] the rule's
-- fingerprint, [4] numbers packed as little-endian doubles (each an integer
-- below 2^53, so exact; one argument costs Redis less than many to pass and
-- parse): flags (1: release what is unused; 2: the rule is of global
-- reach, below), demand (requests per window;
-- -1: unknown), target for the current window (the total the node wants
-- granted in it), target for the next window (0: none), horizon (us:
-- pre-grant the next window when it starts within it), two reports
-- (window, used), window 0 for none, demand TTL (us), the live nodes of the
-- cluster (the registry's count), how long an unknown demand counts (us; 2
-- × MinGap), how long a paced grant lasts at the node's demand (us; 3 ×
-- PaceGap), the total the node needs granted at once for the requests that
-- wait for this exchange (0: none), for a rule of global reach the regions
-- (as the global store counts them; 0: unknown) and how long the store
-- keeps a region's standing share (us), then the rule's ten numbers (see
-- params.lua). KEYS[5], for a rule of global reach, the region's side of
-- the key (below).
--
-- The sliding window counter's node carries what it holds unused as a
-- window ends into the next one, and its first report there moves it in
-- Redis: until then the previous window's grants unused weigh in full on
-- the current one's budget (see the reports, below).
--
-- The sub-window counter is leased per sub-window: W below is a
-- sub-window, and its budget what the window's K - 1 earlier sub-windows
-- left (and, while the next one holds grants, what the K - 2 before it,
-- this one and the next leave), so that any K consecutive sub-windows stay
-- within the limit. The state keeps R of those earlier sub-windows (h:
-- start -> R), written with each slot's R. A node's report of a sub-window
-- with the one after it is final, and what it held unused there is
-- released (see the reports, below): the earlier sub-windows then weigh
-- with their uses, not their grants.
--
-- Returns {now, current window, epoch, granted to the node in it (what it
-- used beyond is debt, not grant), its used there as stored, R there,
-- granted to the node in the next window, R of the previous window, revoked
-- (1 if the limit changed), exhausted (1 if the node wanted more and nothing
-- is left until the window ends), live nodes, room (the current budget
-- less R), paced (1 if the node's grant in the current window, or its grant
-- ahead in the next, was paced: it asks for more as it uses it)}.
local now = clock(ARGV[1])
local node, rule_fp = ARGV[2], ARGV[3]
-- A demand counts for at least two windows (demand_ttl, below): a node
-- refused for the rest of a window syncs rarely until the next one, and
-- still wants its part. Of the rule's numbers, alg, L, W, step and ws.
local flags, demand, want_cur, want_next, horizon, w1, u1, w2, u2, demand_ttl, cluster, guess_ttl, pace_span, wait_cur,
  regions, keep, alg, L, W, _, step, ws = struct.unpack('<dddddddddddddddddddddd', ARGV[4])
local reports = {{w1, u1}, {w2, u2}}
local sub, K = alg == 7, 1
if sub then W, K = step, ws end
demand_ttl = math.max(demand_ttl, 2 * W)
local counter = alg == 3
local m = KEYS[1]
-- A rule of global reach (flags 2; the fixed window only) is leased from
-- the region's part of the limit, not from L: reg, written by the region's
-- exchange with the global store (region.lua), holds that part per window
-- (caps: window -> budget) and the region's standing share (S), the budget
-- of a window it holds no part of yet, which the global store keeps for it
-- (global.lua) until reg[4] (its last exchange and the store's keep).
-- Its fields: [1] caps, [2] S, [3] the window whose part is final, [4] how
-- long S holds, [5] what the others want beyond what the limit has left,
-- [6] the time of the read the last answer applied was to, [7] the
-- opening {window, budget} (below), [8] 1 once the side was read (below),
-- [9] when the side was last written, and its S (region.lua).
-- The node lists the key in the region's set of keys of global reach, for
-- its exchanger to find (syncer/region.go).
local global = fdiv(flags, 2) % 2 == 1

local wt = now - fmod(now, W)

local st = redis.pcall('GET', m)
local fp, ep, nd, hist, reg
if type(st) == 'table' then
  -- a hash: the earlier layout's state (its slots' keys too): start afresh
  other_family(st, m)
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
  st = {}
elseif st then
  st = {pcall(cmsgpack.unpack, st)}
  if not st[1] or type(st[2]) ~= 'string' then
    error('lease_window: ' .. m .. ' holds a string that is not its state')
  end
  fp, ep, nd, hist, reg = st[2], st[3], st[4], st[5], st[9]
else
  st = {}
end
if not ep then ep = now end

-- The sub-window counter's history, start -> R.
if not sub then
  hist = nil
elseif not hist then
  hist = {}
end

-- slots[x] is window x's slot {x, R, g, u}, empty if it held another
-- window; kept[x] when it holds state, to be written back. An empty slot
-- is not: it reads the same as one that holds another window.
local slots, kept = {}, {}
for x = wt - W, wt + W, W do
  local s = st[6 + fmod(fdiv(x, W), 3)]
  if s and s[1] == x then
    kept[x] = true
  else
    s = {x, 0, {}, {}}
  end
  slots[x] = s
end
local kprev, kcur, knext = slots[wt - W], slots[wt], slots[wt + W]

-- node's grant and use in slot s, and the slot's R
local function state(s)
  return s[3][node] or 0, s[4][node] or 0, s[2]
end

local function set(s, g, u, oldg, oldu, R)
  local nr = R - math.max(oldg, oldu) + math.max(g, u)
  s[3][node], s[4][node], s[2] = g, u, nr
  kept[s[1]] = true
  if sub then hist[s[1]] = nr end
  return nr
end

local function sum(t)
  local n = 0
  for _, x in pairs(t) do n = n + x end
  return n
end

local revoked = 0
if fp and fp ~= rule_fp then
  -- The limit changed: every grant not yet used is revoked.
  revoked = 1
  local ss = {kcur, knext}
  -- the counter's unused grant of the previous window, which a node would carry
  if counter then ss[3] = kprev end
  for _, s in ipairs(ss) do
    local g, u = s[3], s[4]
    for id in pairs(g) do g[id] = u[id] or 0 end
    s[2] = sum(u)
    kept[s[1]] = true
    if sub then hist[s[1]] = s[2] end
  end
end

-- Reports: the node's absolute use of the previous, current or next window.
-- A counter's window that a node reports with the one after it is over for
-- the node: its use there is final. What it was granted there beyond moves
-- to the window after, where the node carries it (lease.go: roll): the
-- counter's next window weighs this one at full weight as it opens, so the
-- grant is as safe there, and the node does not open the window dry. A
-- sub-window counter's node drops what it held unused in a sub-window as
-- the next begins (lease.go: roll): Redis releases it, so that it no
-- longer cuts the budget of the sub-windows after it.
for i, r in ipairs(reports) do
  local x, used = r[1], r[2]
  if x == wt - W or x == wt or x == wt + W then
    local k = slots[x]
    local g, u, R = state(k)
    local u2 = math.max(used, u)
    local final = i == 1 and reports[2][1] == x + W and x < wt + W
    if counter and final and g > u2 then
      set(k, u2, u2, g, u, R)
      local k2 = slots[x + W]
      local g2, uu2, R2 = state(k2)
      set(k2, math.max(g2, uu2) + g - u2, uu2, g2, uu2, R2)
    elseif sub and final and g > u2 then
      set(k, u2, u2, g, u, R)
    elseif used > u then
      set(k, g, used, g, u, R)
    end
  end
end

-- Release: give back what is granted and unused, in the current and next
-- windows.
if flags % 2 == 1 then
  for _, k in ipairs({kcur, knext}) do
    local g, u, R = state(k)
    if g > u then set(k, u, u, g, u, R) end
  end
end

-- Demand: each node's requests per window, forgotten after demand_ttl. A
-- demand of -1 is unknown: the node's first exchange of a new key came too
-- soon after its first request to measure one. It counts as the average of
-- the demands known, and the node is granted a part of that claim only
-- (guess), until its next exchange measures it; a node still busy with the
-- key sends that one within guess_ttl, so an unknown demand older than that
-- counts as none.
local guess = demand < 0
nd = nd or {{}, {}}
local ds, seen = nd[1], nd[2] -- each node's demand, and when it reported it
ds[node], seen[node] = demand, now
local live = 0
local demands = {} -- the live nodes' demands, -1 where unknown
for id, t in pairs(seen) do
  if t + demand_ttl >= now then
    local d = ds[id] or 0
    if d < 0 and t + guess_ttl < now then d = 0 end
    demands[id] = d
    live = live + 1
  else
    ds[id], seen[id] = nil, nil
  end
end
local total, known, avg = demand_total(demands, 0)

-- The sub-window counter: R of the K - 1 sub-windows before the current one
-- (hist1), and of the K - 2 before it (hist2); older ones are dropped.
local hist1, hist2 = 0, 0
if sub then
  for x, v in pairs(hist) do
    if x < wt - (K - 1) * W then
      hist[x] = nil
    elseif x < wt then
      hist1 = hist1 + v
      if x >= wt - (K - 2) * W then hist2 = hist2 + v end
    end
  end
end

-- A new key's burst reaches every node at once, and they ask one after the
-- other: in the key's first demand TTL, each node of the cluster yet to ask
-- is assumed to want the average, so that the first to ask is not
-- entitled to the whole budget while the others, refused, wait.
local unseen = 0
if live < cluster and now - ep < demand_ttl then
  unseen = cluster - live
  total = total * cluster / live
  live = cluster
end

-- fraction is a node's part of the budget: its part of the demand, or an
-- even part when nobody reported any.
local function fraction(d)
  if total > 0 then return d / total end
  return 1 / math.max(live, 1)
end

-- claim is what a node with demand d may count on in a window: its
-- entitlement (its part of the budget by demand), or no more than its
-- demand when that is less. Under the limit the claims leave room for
-- spikes; over it, they are the entitlements. A claim covers at most a
-- second or so of demand (span, 5 horizons): in a long window a busy node
-- must not hold the whole budget against nodes whose demand shows up later.
local span = math.min(1, 5 * horizon / W)
local function claim(d, budget)
  if d < 0 then
    -- unknown: the average's claim, or an even part when none is known
    if known == 0 then return math.floor(budget / math.max(live, 1)) end
    d = avg
  end
  return math.min(math.floor(budget * fraction(d)), math.floor(d * span))
end

-- unclaimed is what the other live nodes may count on in slot k and have
-- not taken yet, the nodes yet to ask a new key included (each at the
-- average demand); and of it, the part that is a guess: the claims of
-- unknown demands and of the nodes yet to ask, which their exchanges are
-- about to correct.
--
-- The counter's budget grows through its window, and what the nodes used
-- of it is spent whatever their parts: there a claim is a part of what the
-- budget has left beyond the uses reported (free), on top of the node's
-- use, so that a node whose arrivals ran ahead of its part is not held to
-- it.
local function free(u, budget) return math.max(budget - sum(u), 0) end

local function unclaimed(k, budget)
  local g, u = k[3], k[4]
  local base = budget
  if counter then base = free(u, budget) end
  local soft = unseen * claim(-1, base)
  local r = soft
  for id, d in pairs(demands) do
    if id ~= node then
      local c = claim(d, base) - math.max(g[id] or 0, u[id] or 0)
      if counter then c = c + (u[id] or 0) end
      c = math.max(c, 0)
      r = r + c
      if d < 0 then soft = soft + c end
    end
  end
  return r, soft
end

-- paced caps the node's grant in slot k of the fixed window, whose window
-- runs from start to wend, when the budget will not last the window.
--
-- While it lasts, a node is granted its claim ahead (grant, below). Over
-- the limit, a budget split ahead runs out on each node after that node's
-- own first arrivals, where an exact limiter admits the cluster's first
-- ones: the two differ by the spread of each node's share of the first L
-- arrivals, about 1% of them at L = 10,000 on 8 nodes, 3% at 1,000. So
-- when the budget left (avail) and what the nodes hold unused (each
-- other node's grant less its use as last reported, less its demand since)
-- would be spent before wend at the demands reported, the node is granted
-- up to what lasts it pace_span (three PaceGaps: a paced node asks for
-- more once what it holds lasts less than two, and an exchange late or
-- slow must not leave it dry), and no more than its part by demand of that
-- water level,
-- so that the nodes run out of the budget together, apart by the spread of
-- their arrivals over their last exchange's span only. A node may hold at
-- least pace_floor, or half its part of the water level when that is less:
-- at a few requests per PaceGap (a node with a small part of a key's
-- traffic), arrivals come in bursts well above their mean, and a node held
-- to the mean would be refused for want of a lease at every burst; but a
-- floor above its part as the budget runs out would outlast the others'
-- grants, and the nodes would no longer run out together (a flat floor
-- refuses more over the limit when the traffic is skewed onto one node).
-- It returns the most the node may be granted, or nil when the budget
-- lasts the window.
local pace_floor = 8
local function paced(k, avail, start, wend)
  if counter or total <= 0 or avail <= 0 then return nil end
  -- what is held only lengthens it: the budget left alone may settle it
  if math.max(now, start) + avail * W / total >= wend then return nil end
  local g, u = k[3], k[4]
  local held, own = 0, 0
  for id, d in pairs(demands) do
    if d < 0 then d = avg end
    local h = (g[id] or 0) - (u[id] or 0)
    if id == node then
      own = math.max(h, 0)
    else
      held = held + math.max(h - d * math.max(now - math.max(seen[id], start), 0) / W, 0)
    end
  end
  local lasts = (avail + held + own) * W / total
  if math.max(now, start) + lasts >= wend then return nil end
  local d = demand
  if d < 0 then d = avg end
  local level = math.max(math.floor(d * math.min(pace_span, lasts) / W),
    math.min(pace_floor, math.floor(d * lasts / W / 2)), 1)
  return math.max(level - own, 0)
end

-- grant gives the node up to its target in slot k, within avail (what is
-- left of the window's budget). The node is entitled to its share of the
-- budget by demand (1/live when nobody reported any): it gets up to that at
-- once, so the whole budget is out when the window opens, and beyond it a
-- share of what is left, so budget others do not ask for is not lost.
-- what the others are entitled to and have not claimed is kept for them
-- (reserve), but for the last horizon of the current window, when they are
-- unlikely to claim it any more. It returns the node's grant in k, R,
-- whether the budget is exhausted for it, and whether its grant was paced.
local function grant(k, target, avail, budget, reserve, start)
  local g, u, R = state(k)
  local have = math.max(g, u)
  if avail <= 0 then return g, R, target > have, false end
  local cap = paced(k, avail, start, start + W)
  if cap then
    local x = math.max(math.min(target - have, cap, avail), 0)
    if x > 0 then R = set(k, have + x, u, g, u, R) end
    local ex = target > have + x and avail - x <= 0
    return have + x, R, ex, not ex
  end
  local base = budget
  if counter then
    base = free(k[4], budget)
  end
  local own = claim(demand, base)
  if guess then own = math.ceil(own / 4) end
  if counter then own = own + u end
  local kept, soft = 0, 0
  if reserve then kept, soft = unclaimed(k, budget) end
  -- A node is granted up to its claim when it asks, so a key lasts its
  -- window on one exchange at its usual demand; beyond, what the others do
  -- not count on.
  local x = math.min(math.max(target, own) - have, avail, math.max(own - have, avail - kept, 0))
  x = math.max(x, 0)
  -- A node granted on a guess is not told the window is exhausted: its
  -- measured demand may entitle it to more. Nor is a node while part of
  -- what is kept for the others is a guess: their exchanges, a MinGap or
  -- so away, may leave it more.
  local sure = not guess and soft == 0
  if x == 0 then return g, R, sure and target > have and avail <= kept, false end
  R = set(k, have + x, u, g, u, R)
  return have + x, R, sure and target > have + x and avail - x <= kept, false
end

local Rprev, Rnext = kprev[2], knext[2]
-- A key of global reach new to the region (no answer yet, reg[6]) takes
-- up its side (KEYS[5]; reg[8] once read): the standing share the store
-- last gave the region and how long it holds, which outlive the state as
-- long as the store keeps the share. Without a side, the region opens the
-- key once it knows the regions' count: it may admit up to L ÷ regions in
-- this window before its exchanger's first answer (reg[7]), which the
-- store keeps for every region yet to ask in a new key's first moments
-- (global.lua); the side then records the opening, so that a key the
-- region opened is not opened again while the store may not have heard of
-- it.
if global then
  reg = reg or {{}, 0}
  if not reg[6] and not reg[7] and not reg[8] then
    local side = redis.call('GET', KEYS[5])
    if side then
      reg[8] = 1
      local v = {pcall(cmsgpack.unpack, side)}
      if v[1] and type(v[2]) == 'number' and type(v[3]) == 'number' then
        reg[2], reg[4] = v[2], v[3]
      end
    elseif regions > 0 then
      reg[7] = {wt, fdiv(L, regions)}
      redis.call('SET', KEYS[5], cmsgpack.pack(0, 0), 'PX', ttl_ms(keep))
    end
  end
end
-- part is the budget of window x: L, or the region's part of it.
local function part(x)
  if not global then return L end
  local S = reg[2]
  if (reg[4] or 0) < now then S = 0 end
  local o = reg[7]
  if o and o[1] == x then S = math.max(S, o[2]) end
  return math.min(reg[1][x] or S, L)
end
local budget = part(wt)
if counter then
  -- The counter admits while prev * left / ws + cur <= L: the budget of the
  -- current window grows as the previous one weighs less. A grant is safe
  -- from the moment it is made. The next window starts with this one as
  -- its previous at full weight: the two together stay within L.
  -- What a node holds unused in the previous window it may carry into
  -- this one (the reports above): that part weighs in full.
  local left = ws - fdiv(now - wt, step)
  local Uprev = sum(kprev[4])
  budget = math.min(fdiv(math.max(L * ws - Uprev * left, 0), ws) - (Rprev - Uprev), L - Rnext)
elseif sub then
  budget = L - hist1
  if K >= 2 then budget = math.min(budget, L - hist2 - Rnext) end
  budget = math.max(budget, 0)
end
local Rcur = kcur[2]
-- Requests wait on the node for this exchange (wait_cur: the total it needs
-- granted for them at once): they are granted first, as far as the budget
-- goes, before anything kept for the others or paced. They are requests,
-- not a forecast, and an exact limiter admits requests in the order they
-- come.
do
  local g, u, R = state(kcur)
  local have = math.max(g, u)
  local x = math.min(wait_cur - have, budget - Rcur)
  if x > 0 then Rcur = set(kcur, have + x, u, g, u, R) end
end
local gcur, exhausted, is_paced
gcur, Rcur, exhausted, is_paced = grant(kcur, want_cur, budget - Rcur, budget, now < wt + W - horizon, wt)

-- The next window is granted ahead, as the current one ends, so that it
-- does not open with a gap: the fixed window only. The counter's next window
-- opens with this one at full weight, where a grant ahead would only move
-- budget from this window's end to the next one's start; a node opens it
-- with what it holds unused of this one instead (the reports above).
local gnext = 0
if want_next > 0 and not counter and now >= wt + W - horizon then
  local nbudget = part(wt + W)
  if sub and K >= 2 then nbudget = math.max(L - hist2 - Rcur, 0) end
  local paced_next, _
  gnext, Rnext, _, paced_next = grant(knext, want_next, nbudget - Rnext, nbudget, true, wt + W)
  is_paced = is_paced or paced_next
else
  gnext = state(knext)
end

-- Write the state back, in one call. It lives as long as the demands and
-- the windows it holds, plus a second of grace.
local w = {}
for x, s in pairs(slots) do
  if kept[x] then w[1 + fmod(fdiv(x, W), 3)] = s end
end
redis.call('SET', m, cmsgpack.pack(rule_fp, ep, nd, hist, w[1], w[2], w[3], reg),
  'PX', ttl_ms(math.max(3 * W, demand_ttl, K * W)))

local _, ucur = state(kcur)
-- Exhausted means until the window ends: true of the fixed window only. The
-- counter's budget grows with every step of its window.
local ex = 0
-- A region's part grows as its exchanger brings more, until the global
-- store says the limit is spent (reg[3]: the window whose part is final).
if exhausted and not counter and (not global or reg[3] == wt) then ex = 1 end
local room = budget - Rcur
local pc = 0
if is_paced then pc = 1 end
if sub then Rprev = hist1 end
return {now, wt, ep, gcur, ucur, Rcur, gnext, Rprev, revoked, ex, live, room, pc}
