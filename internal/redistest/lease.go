package redistest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// windowView lists the state of a window lease (syncer/lua/lease_window.lua:
// a string of values packed with cmsgpack) as part, field, value triples:
// part "m" holds fp, ep, and per node d.<node> (demand) and t.<node> (when
// reported), and h.<start> (a sub-window's R); parts w0, w1, w2, the window
// slots, hold id, R, and per node g.<node> (granted) and u.<node> (used).
// Numbers are written in full.
const windowView = `
local v = redis.call('GET', KEYS[1])
local out = {}
if not v then return out end
local fp, ep, n, h, s0, s1, s2 = cmsgpack.unpack(v)
local function put(part, f, v) out[#out + 1], out[#out + 2], out[#out + 3] = part, f, v end
local function num(x) return string.format('%d', x) end
local function each(part, prefix, t) for id, v in pairs(t) do put(part, prefix .. id, num(v)) end end
put('m', 'fp', fp)
put('m', 'ep', num(ep))
each('m', 'd.', n[1])
each('m', 't.', n[2])
if h then
  for x, r in pairs(h) do put('m', 'h.' .. num(x), num(r)) end
end
for i, s in pairs({s0, s1, s2}) do
  local part = 'w' .. (i - 1)
  put(part, 'id', num(s[1]))
  put(part, 'R', num(s[2]))
  each(part, 'g.', s[3])
  each(part, 'u.', s[4])
end
return out`

// WindowLease reads the state of a window lease whose state is at meta (the
// key part "m") and returns it by part ("m", "w0", "w1", "w2"), each a
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
