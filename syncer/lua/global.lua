-- The global store's side of a global rule's exchange (see region.lua): the
-- regions lease parts of the limit L per window from it, as nodes lease
-- from their region's Redis.
--
-- Per window x, each region r holds a part g[x][r], or, until it asks,
-- its standing share: the most it admits in a window it holds no part of
-- (a window that opens before it reaches the global store: cut off, or
-- the store down). A region's standing share is its part of L by demand,
-- within what the other regions' shares leave: the shares never sum past
-- L, so neither do the regions that fall back on them. What a region holds
-- in x is max(S, B) without a part, where B is the share it last said it
-- holds (its reply may be lost; it holds the one before), or its part.
-- Parts are granted from L less what the others hold: the regions together
-- never pass L.
--
-- A state the store lost (a restart: the first region to ask holds some of
-- the key beyond its opening) takes the first fresh µs of its life to hear
-- from every region: each says what it holds, and nothing more is granted
-- until they have.
--
-- A key new to a region opens there at L ÷ regions before the region's
-- first answer (lease_window.lua): a new key's burst reaches every region
-- at once, and each admits its part at once. So in a new key's first open
-- µs, the store keeps that opening in every window for each region yet to
-- ask (the regions counted less those that asked): what they admitted is
-- never granted to the first to ask.
--
-- Every region learns of a new key (region.go: the store's births): it
-- then holds the key's side (lua/lease_window.lua), and does not open a key
-- the store knows. A key is announced when it is born, and again every half
-- keep while regions ask for it, as long as the sides last.
--
-- KEYS[1] the key's global state, a string of six values packed with
-- cmsgpack: fp, ep (the epoch), regions (r -> {d, t, S, B, q}: demand per
-- window, when it last asked, standing share, share held, the time of the
-- read its last ask came from), parts (x -> {r -> part}), how the state
-- began: 1 new (the openings kept), 2 lost (young); nil, an earlier
-- layout's, young while fresh; and when it was last announced.
-- ARGV: [1] now ('' for Redis's clock), [2] region, [3] the rule's
-- fingerprint, [4] numbers packed as little-endian doubles: demand, window,
-- part held there, used there, wanted there (the part the region asks
-- for), next window, part held there, wanted there (0: no ask), standing
-- share held, fresh (µs), how long a region that stopped asking keeps its
-- standing share (µs), the region's lookahead (µs: how long before a window's end the
-- parts kept for the others' demands are released), the time of the read
-- the ask comes from, 1 if the part held in the window is the region's
-- opening (no answer yet), the regions as counted (0: unknown), and how
-- long a new key's openings are kept (µs: a region's exchanger asks
-- within that of its opening).
-- Returns {now, part in the window, part in the next (-1: none),
-- standing share, left (L less every region's hold, after the grant),
-- short (what the others' demands entitle them to in the window and they
-- do not hold: what the region may give back), excess (what the others
-- hold there beyond their part by demand, and the openings kept: what may
-- come back), 1 if the key is to be announced}; a
-- part of -1 in the window for an ask older than one answered.
local now = clock(ARGV[1])
local region, rule_fp = ARGV[2], ARGV[3]
local D, x, hx, ux, wx, xn, hn, wn, B, fresh, keep, look, seq, opening, nr, open =
  struct.unpack('<dddddddddddddddd', ARGV[4])
local L, W = parse_fp(rule_fp).L, parse_fp(rule_fp).w
local m = KEYS[1]

local fp, ep, regs, parts, born, an
local raw = redis.call('GET', m)
if raw then
  local st = {pcall(cmsgpack.unpack, raw)}
  if not st[1] or type(st[2]) ~= 'string' then
    error('global: ' .. m .. ' holds a string that is not its state')
  end
  fp, ep, regs, parts, born, an = st[2], st[3], st[4], st[5], st[6], st[7]
end
if not ep then
  ep, regs, parts = now, {}, {}
  -- A key new to the store is new, unless its first region holds some of
  -- it beyond its opening: then the store lost the state.
  born = 1
  if (hx > 0 and opening ~= 1) or B > 0 then born = 2 end
end
if fp and fp ~= rule_fp then
  -- The limit changed: standing shares scale to it; parts held stay, to
  -- their windows' end.
  local old = parse_fp(fp).L
  for _, g in pairs(regs) do g[3] = fdiv(g[3] * L, math.max(old, 1)) end
end

-- Forget the windows over, and the regions that stopped asking keep and
-- three windows ago: a region cut off holds its standing share keep long,
-- then nothing.
for y in pairs(parts) do
  if y < x - W then parts[y] = nil end
end
for r, g in pairs(regs) do
  -- the region stops taking leases from its share keep after its last
  -- reply (a one-way trip after its ask); those it took last to their
  -- window's end, and the next
  if r ~= region and g[2] + keep + 3 * W < now then regs[r] = nil end
end
local me = regs[region] or {0, now, 0, 0, 0}
-- An ask older than one the store answered (a late packet of a round that
-- timed out) changes nothing: the region holds what the newer one said.
if seq <= (me[5] or 0) then return {now, -1, -1, me[3], 0, 0, 0, 0} end
regs[region] = me
me[1], me[2], me[4], me[5] = D, now, B, seq

-- holds(y, r) is what region r holds in window y.
local function holds(y, r, g)
  local p = parts[y]
  if p and p[r] then return p[r] end
  return math.max(g[3], g[4])
end
-- The openings kept: a new key's, for the regions yet to ask.
local opened = 0
if born == 1 and now - ep < open and nr > 0 then
  local asked = 0
  for _ in pairs(regs) do asked = asked + 1 end
  opened = math.max(nr - asked, 0) * fdiv(L, nr)
end
local function others(y)
  local c = opened
  for r, g in pairs(regs) do
    if r ~= region then c = c + holds(y, r, g) end
  end
  return c
end

-- fair(r) is region r's part of L by demand (all of it when nobody
-- reported any).
local total = 0
for _, g in pairs(regs) do total = total + g[1] end
local function fair(g)
  if total <= 0 then return L end
  return fdiv(L * g[1], total)
end

-- grant gives the region up to want in window y, from what the others do
-- not hold. Of that, what the others' demands entitle them to and they do
-- not hold yet is kept for them until the window's last lookahead: the
-- region gets at least its own part by demand, and beyond it what nobody
-- else is entitled to.
local young = born ~= 1 and now - ep < fresh
-- short(y) is what the others' demands entitle them to in window y and
-- they do not hold.
local function short(y)
  local k = 0
  for r, o in pairs(regs) do
    if r ~= region then k = k + math.max(fair(o) - holds(y, r, o), 0) end
  end
  return k
end
-- A region alone with the key (no other region holds any of window y,
-- nor has a demand) takes all of L, whatever it asked for: its next burst
-- needs no round trip, and nobody else wants any. A region that comes
-- later is kept its part by demand, which this one gives back.
local function grant(y, have, want)
  parts[y] = parts[y] or {}
  local g = have
  if total - D <= 0 and others(y) <= 0 then want = L end
  if not young and want > have then
    local avail = L - others(y) - have
    local kept = 0
    if now < y + W - look then kept = short(y) end
    g = have + math.max(math.min(want - have, avail, math.max(avail - kept, fair(me) - have)), 0)
  end
  parts[y][region] = g
  return g
end
local gx = grant(x, math.max(hx, ux), wx)
-- The next window: asked for, or held already (its nodes took grants ahead
-- from the region's share, which may have been higher than it is now).
local gn = -1
if wn > 0 or hn > math.max(me[3], B) then gn = grant(xn, hn, wn) end

-- The standing share: the region's part of L by demand, within what the
-- others may hold in a window it holds nothing of.
local S = B
if not young then
  S = 0
  if total > 0 then S = fair(me) end
  local room = L
  for r, g in pairs(regs) do
    if r ~= region then room = room - math.max(g[3], g[4]) end
  end
  if gn < 0 then room = math.min(room, L - others(xn)) end
  S = math.max(math.min(S, room), 0)
end
me[3] = S

local announce = 0
if not an or now - an >= keep / 2 then an, announce = now, 1 end
redis.call('SET', m, cmsgpack.pack(rule_fp, ep, regs, parts, born, an), 'PX', ttl_ms(keep + 3 * W))
-- excess(y) is what the others hold in window y beyond their part by
-- demand: what they may yet give back.
local function excess(y)
  local k = 0
  for r, o in pairs(regs) do
    if r ~= region then k = k + math.max(holds(y, r, o) - fair(o), 0) end
  end
  return k
end
-- The openings kept may come back: the part is not final while they stand.
return {now, gx, gn, S, L - others(x) - gx, short(x), excess(x) + opened, announce}
