-- Several rules decided as one, all in one slot (one node): each is
-- checked, and all are charged only if all admit. KEYS: two per rule (its
-- state and its log). ARGV[1] = now ('' for Redis's clock), then per rule its cost and its
-- NPARAMS parameters. Returns {all admitted (1/0), then per rule {reason,
-- remaining, reset, retry, now, z}}; when not all admit, a rule with room is
-- reported as it stands, without this request.
local now = clock(ARGV[1])
local rules = #KEYS / 2
local costs, ps, out, ok = {}, {}, {}, true
for i = 1, rules do
  local base = 2 + (i - 1) * (NPARAMS + 1)
  costs[i], ps[i] = tonumber(ARGV[base]), params(base + 1)
  local r = deciders[ps[i].alg](KEYS[2 * i - 1], KEYS[2 * i], ps[i], now, costs[i], false)
  out[i] = r
  if r[1] ~= 0 then ok = false end
end
for i = 1, rules do
  if ok then
    deciders[ps[i].alg](KEYS[2 * i - 1], KEYS[2 * i], ps[i], now, costs[i], true)
  elseif out[i][1] == 0 then
    out[i] = deciders[ps[i].alg](KEYS[2 * i - 1], KEYS[2 * i], ps[i], now, 0, false)
  end
end
local res = {0}
if ok then res[1] = 1 end
for i = 1, rules do
  for j = 1, 6 do res[#res + 1] = out[i][j] end
end
return res
