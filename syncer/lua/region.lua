-- A region's side of a global rule's exchange with the global store, run on
-- the region's Redis by the region's exchanger (see global.lua for the other
-- side, and lease_window.lua for the state and its part reg).
--
-- KEYS[1] the key's state (lease_window.lua), KEYS[2] its side (the
-- standing share as the last answer gave it, which outlives the state;
-- lease_window.lua). ARGV[1] 'r' or 'w', [2] now
-- ('' for Redis's clock), [3] numbers packed as little-endian doubles.
--
-- 'r' reads what the region needs and holds; its numbers: the lookahead
-- (us: how far ahead a part must last, two exchanges and a round trip),
-- the nodes' demand TTL (us; lease_window.lua's), and 1 if the store
-- answered the exchanger's last round.
-- Before it reads, it gives back what the region holds of the current
-- window beyond what its nodes hold and two lookaheads of its demand, as
-- far as the others wanted more at the store's last answer: the part the
-- global store then records is never below what the region may admit. Returns {0} for a state that is gone or not of a global rule's
-- fixed window, else {1, fp, now, window, W, demand (the region's nodes',
-- requests per window), R (what its nodes hold or used in the window),
-- used, part held, R of the next window, part held there, standing share,
-- 1 if the part held is the region's opening: no answer yet}.
--
-- 'w' records the global store's answer; its numbers: window, part, next
-- window, part there (-1: none), standing share, what the limit has left
-- in the window (0: the part is final, reg[3], which lease_window.lua
-- tells the nodes), how long the store keeps the
-- share for the region (us: the region holds it that long, reg[4]), the
-- time of the read the answer is to (reg[6]: the last applied), and what
-- the others want beyond what they hold (reg[5], for 'r': less what the
-- limit has left). A part only grows here: 'r' alone lowers one. Returns
-- 1, or 0 for a state that is gone.
local m, op, now = KEYS[1], ARGV[1], clock(ARGV[2])
local raw = redis.pcall('GET', m)
-- gone, or not a lease state of this layout (a hash of an earlier one)
if not raw or type(raw) == 'table' then return {0} end
local st = {pcall(cmsgpack.unpack, raw)}
if not st[1] or type(st[2]) ~= 'string' then return {0} end
local p = parse_fp(st[2])
local reg = st[9]
if p.alg ~= 1 or not reg then return {0} end
local W, L = p.w, p.L
local caps = reg[1]

local function save()
  redis.call('SET', m, cmsgpack.pack(st[2], st[3], st[4], st[5], st[6], st[7], st[8], reg), 'KEEPTTL')
end

if op == 'w' then
  local x, c, xn, cn, S, left, keep, seq, short = struct.unpack('<ddddddddd', ARGV[3])
  -- an answer older than one applied (a late write of an earlier
  -- exchanger) changes nothing
  if seq <= (reg[6] or 0) then return 0 end
  reg[4], reg[6] = now + keep, seq
  caps[x] = math.max(caps[x] or 0, c)
  -- the window's part is final: the limit is spent, its nodes are told;
  -- or no longer, should some come back
  if left <= 0 then
    reg[3] = x
  elseif reg[3] == x then
    reg[3] = nil
  end
  reg[5] = math.max(short - math.max(left, 0), 0)
  if cn >= 0 then caps[xn] = math.max(caps[xn] or 0, cn) end
  for y in pairs(caps) do
    if y < x - W then caps[y] = nil end
  end
  reg[2] = S
  -- the first answer holds the opening (the part granted is never below
  -- what the region said it holds)
  reg[7] = nil
  -- The side, when the share changed or a quarter of its span has passed
  -- since it was written (reg[9]: when, and the share written).
  local sw = reg[9]
  if type(sw) ~= 'table' or sw[2] ~= S or now - sw[1] >= keep / 4 then
    reg[9] = {now, S}
    redis.call('SET', KEYS[2], cmsgpack.pack(S, reg[4]), 'PX', ttl_ms(keep))
  end
  save()
  return 1
end

local look, dttl, reached = struct.unpack('<ddd', ARGV[3])
dttl = math.max(dttl, 2 * W)
local wt = now - fmod(now, W)
local function slot(x)
  local s = st[6 + fmod(fdiv(x, W), 3)]
  if s and s[1] == x then return s end
  return nil
end
local function sum(t)
  local n = 0
  for _, v in pairs(t) do n = n + v end
  return n
end
local function held(x)
  local S = reg[2]
  if (reg[4] or 0) < now then S = 0 end
  local o = reg[7]
  if o and o[1] == x then S = math.max(S, o[2]) end
  return math.min(caps[x] or S, L)
end

-- The demands its nodes reported within the demand TTL: a node that
-- stopped asking no longer wants the key.
local D = 0
if st[4] then
  local live = {}
  for id, d in pairs(st[4][1]) do
    if (st[4][2][id] or 0) + dttl >= now then live[id] = d end
  end
  D = demand_total(live, 0)
end
local Rc, Uc, Rn = 0, 0, 0
local sc, sn = slot(wt), slot(wt + W)
if sc then Rc, Uc = sc[2], sum(sc[4]) end
if sn then Rn = sn[2] end
local hc = held(wt)
-- A region that holds more than its nodes took wants no more than it
-- uses: its nodes' demands, reported as they last asked, lag a region
-- gone quiet by up to their TTL (two windows at least). But the uses the
-- nodes reported lag too (a node reports as it exchanges, and its lease
-- may last the window): while they hold grants, what they hold bounds
-- their use, and the demand falls by half at the most, never to nothing on
-- reports alone, which would leave the region no part by demand.
if now - wt >= look and Rc < hc then
  local el = now - wt
  D = math.min(D, math.max(cdiv(Uc * W, el), math.min(cdiv(D, 2), cdiv(Rc * W, el))))
end
local ahead = cdiv(D * look, W)
local keep = math.max(Rc, Uc + 2 * ahead)
-- Only what the other regions' demands entitle them to and they do not
-- hold, beyond what the limit has left, by the store's last answer
-- (reg[5]): a part nobody else may have
-- costs nobody anything, and held, it spares the region's nodes an
-- exchange's wait and keeps the region whole should the store go. And
-- only while the store answers: a region cut off would give back what
-- nobody can take, and never get it back.
local give = math.min(hc - keep, reg[5] or 0)
if reached == 1 and hc > keep + ahead and give > 0 then
  caps[wt], hc = hc - give, hc - give
  save()
end
-- What the region holds of the next window: its part there, or its share,
-- and at least what its nodes took ahead.
local S = reg[2]
if (reg[4] or 0) < now then S = 0 end
local opening = 0
if reg[7] then opening = 1 end
return {1, st[2], now, wt, W, D, Rc, Uc, hc, Rn, math.max(held(wt + W), Rn), S, opening}
