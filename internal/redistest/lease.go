package redistest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// windowView lists the state of a window lease (syncer/lua/lease_window.lua)
// as part, field, value triples: part "m" holds fp, ep, and per node
// d.<node> (demand) and t.<node> (when reported), and h.<start> (a
// sub-window's R); parts w0, w1, w2, the window slots, hold id, R, and per
// node g.<node> (granted) and u.<node> (used). Numbers are written in full.
const windowView = `
local st = redis.call('HMGET', KEYS[1], 'fp', 'ep', 'n', 'h', 's0', 's1', 's2')
local out = {}
local function put(part, f, v) out[#out + 1], out[#out + 2], out[#out + 3] = part, f, v end
local function num(x) return string.format('%d', x) end
local function each(part, prefix, t) for id, v in pairs(t) do put(part, prefix .. id, num(v)) end end
if st[1] then put('m', 'fp', st[1]) end
if st[2] then put('m', 'ep', st[2]) end
if st[3] then
  local n = cmsgpack.unpack(st[3])
  each('m', 'd.', n[1])
  each('m', 't.', n[2])
end
if st[4] then
  for x, r in pairs(cmsgpack.unpack(st[4])) do put('m', 'h.' .. num(x), num(r)) end
end
for i = 0, 2 do
  if st[5 + i] then
    local s, part = cmsgpack.unpack(st[5 + i]), 'w' .. i
    put(part, 'id', num(s[1]))
    put(part, 'R', num(s[2]))
    each(part, 'g.', s[3])
    each(part, 'u.', s[4])
  end
end
return out`

// WindowLease reads the state of a window lease whose state hash is meta
// (the key part "m") and returns it by part ("m", "w0", "w1", "w2"), each a
// map of fields to values as windowView lists them. A part without state is
// an empty map.
func WindowLease(t testing.TB, c redis.UniversalClient, meta string) map[string]map[string]string {
	t.Helper()
	v, err := c.Eval(context.Background(), windowView, []string{meta}).StringSlice()
	require.NoError(t, err, "reading %s", meta)
	out := map[string]map[string]string{"m": {}, "w0": {}, "w1": {}, "w2": {}}
	for i := 0; i+2 < len(v); i += 3 {
		out[v[i]][v[i+1]] = v[i+2]
	}
	return out
}
