package syncer

import (
	"github.com/redis/go-redis/v9"
)

// The store's births. A key of global reach new to a region opens there
// at L ÷ regions before the region's first exchange with the store
// (lua/lease_window.lua), which is exact only while the key is new
// everywhere: the store keeps that opening for the regions yet to ask in
// the key's first moments (lua/global.lua). A key the other regions have
// used longer may hold all of L there, so every region learns of the keys
// the store knows: the exchanger that asked for a key the store announces
// (a key born, and again every half keep while regions ask for it) adds
// it to the store's births, and every exchanger reads the births since its
// last read at each round and writes each key's side in its region, which
// stops the region from opening the key. Both ride the round's first
// pipeline to the store: no round trip of their own.

// birthsKey names, in the global store, the sorted set of the keys
// announced, scored by the store's time of the announcement.
func (ks *Keyspace) birthsKey() string { return ks.prefix() + ":born" }

// maxAnnounce bounds the announcements one round carries: the rest go with
// the next.
const maxAnnounce = 4096

var (
	// scriptBirths adds the keys ARGV[3..] to the births (KEYS[1]) at the
	// store's time, forgetting then those older than ARGV[2] (us), and
	// returns {now, the keys announced after ARGV[1] (us; 0: ARGV[2] ago)}.
	scriptBirths = redis.NewScript(`local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local keep = tonumber(ARGV[2])
if #ARGV > 2 then
  for i = 3, #ARGV do redis.call('ZADD', KEYS[1], now, ARGV[i]) end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - keep))
  redis.call('PEXPIRE', KEYS[1], math.floor(keep / 1000) + 1000)
end
local since = tonumber(ARGV[1])
if since <= 0 then since = now - keep end
return {now, redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', since), string.format('%d', now))}`)
	// scriptSide writes a key's side in the region (KEYS[1]) for a key
	// another region announced: no standing share, nothing to open; a side
	// there already keeps its share and lasts ARGV[1] ms more.
	scriptSide = redis.NewScript(`if not redis.call('SET', KEYS[1], cmsgpack.pack(0, 0), 'NX', 'PX', ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return 1`)
)

// birthsCall is the round's call of scriptBirths: the keys to announce,
// and the births since the last read. It returns how many it announces.
func (x *exchanger) birthsCall() (call, int) {
	n := min(len(x.announce), maxAnnounce)
	args := make([]any, 0, 2+n)
	args = append(args, x.since, regionsLive.Microseconds())
	for _, k := range x.announce[:n] {
		args = append(args, k)
	}
	return call{scriptBirths, []string{x.s.ks.birthsKey()}, args}, n
}

// applyBirths reads scriptBirths' reply to a call that announced n keys:
// those are announced, and it returns the writes of the sides of the keys
// born since the last read.
func (x *exchanger) applyBirths(cmd *redis.Cmd, n int) []call {
	v, err := cmd.Slice()
	if err != nil || len(v) != 2 {
		return nil
	}
	now, ok := v[0].(int64)
	keys, ok2 := v[1].([]any)
	if !ok || !ok2 {
		return nil
	}
	x.announce = x.announce[n:]
	x.since = now
	ttl := keepFor(0).Milliseconds()
	sides := make([]call, 0, len(keys))
	for _, k := range keys {
		if name, ok := k.(string); ok {
			sides = append(sides, call{scriptSide, []string{sideOf(name)}, []any{ttl}})
		}
	}
	return sides
}
