package syncer

import (
	"context"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/synchook"
)

// A rule of global reach holds one limit across regions, each with its own
// Redis. Its nodes lease from their region's Redis as for any rule, but
// from the region's part of the limit, not from the whole of it
// (lua/lease_window.lua: reg); one node per region at a time, the
// exchanger, leases those parts from the global store for the region's keys
// (lua/region.lua on the region's Redis, lua/global.lua on the global
// store), every Sync.Interval, in one pipeline per batch of keys. The request path
// never waits on the global store, and the traffic to it grows with the
// keys the region uses, not with its requests. docs/multiregion.md has the
// design and its bounds.

// The region's keys: its keys of global reach (a sorted set of their state
// keys, scored by their last exchange) and the lock of its exchanger.
const (
	regionActive = "active"
	regionLock   = "exchanger"
)

// regionKey names one of the region's keys.
// They share a hash tag: the lock's script prunes the set.
func (ks *Keyspace) regionKey(part string) string { return ks.prefix() + ":{region}:" + part }

// regionsKey names, in the region's Redis, the regions' count as the
// global store last told the exchanger: in the registry's slot, which
// reads it for every node (lua/registry.lua).
func (ks *Keyspace) regionsKey() string { return "{" + ks.prefix() + ":nodes}:regions" }

// storeRegionsKey names, in the global store, the set of regions scored by
// their exchangers' last registration.
func (ks *Keyspace) storeRegionsKey() string { return ks.prefix() + ":regions" }

// globalSide is the part name of a key of global reach's side in the
// region's Redis: the standing share as last answered, which outlives the
// key's state (lua/lease_window.lua).
const globalSide = "g"

// sideOf names the side of the key whose state is named state (its part
// "m").
func sideOf(state string) string {
	return strings.TrimSuffix(state, "m") + globalSide
}

var (
	scriptRegion = compose("prelude", "params", "region")
	scriptGlobal = compose("prelude", "params", "global")
	// scriptLead takes or keeps the region's lock: KEYS[1] the lock,
	// KEYS[2] the region's set of keys, ARGV the node, the lock's TTL (ms)
	// and how long a key stays in the set unused (us). Returns 1 if the node
	// holds the lock, having dropped from the set the keys unused that long.
	scriptLead = redis.NewScript(`local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local t = redis.call('TIME')
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%d', t[1] * 1000000 + t[2] - ARGV[3]))
return 1`)
	// scriptRegions registers the region in the global store's set of
	// regions: KEYS[1] the set, ARGV the region and how long a region
	// counts after its last registration (us). Returns the regions
	// counted.
	scriptRegions = redis.NewScript(`local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - ARGV[2]))
redis.call('PEXPIRE', KEYS[1], math.floor(ARGV[2] / 1000) + 1000)
return redis.call('ZCARD', KEYS[1])`)
	// scriptResign gives the region's lock up: KEYS[1] the lock, ARGV the
	// node; another node takes it at its next round.
	scriptResign = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1`)
)

// standingKeep is how long a region that stopped reaching the global
// store holds its standing share, and the store keeps it for the region:
// the longest cut-off a region rides out at its share of the limit. After
// it the region admits nothing of a window it holds no part of, and the
// others may take the whole limit.
const standingKeep = 5 * time.Minute

// keepFor is standingKeep for a window of w µs, or three windows when
// longer: a region's part of a window outlives its silence.
func keepFor(w int64) time.Duration {
	return max(standingKeep, 3*time.Duration(w)*time.Microsecond)
}

// globalKey names, in the global store, the key whose state the region's
// Redis holds under name: apart from it, should the two be one server.
func globalKey(name string) string { return name + ":g" }

// exchangeBatch is how many keys one round's pipelines carry at most.
const exchangeBatch = 512

// exchanger runs the region's exchanges, on the node that holds the
// region's lock.
type exchanger struct {
	s      *syncer
	global redis.UniversalClient
	region string
	every  time.Duration // the round's period
	limit  time.Duration // bounds each exchange with the global store
	rtt    atomic.Int64  // the global store's round trip, smoothed (ns)
	// measured is set once the first round trip, which dials and loads
	// the script, is past: it does not count.
	measured bool
	// reached is set while the store answers the exchanger's asks: a
	// region gives back what it holds only then (lua/region.lua).
	reached bool
	// regions is the regions' count as the store last said (0: not yet),
	// and registered when the exchanger last told the store of its region.
	regions    int64
	registered time.Time
	// announce are the keys the store said to announce, not yet sent;
	// since is the store's time of the last births read (births.go).
	announce []string
	since    int64

	rounds, failed atomic.Int64 // rounds led, and failed
	keys           atomic.Int64 // keys the last round exchanged
}

// GlobalStats returns the figures of the node's exchanges with the global
// store; zero without one.
func (s *syncer) GlobalStats() synchook.GlobalStats {
	x := s.region
	if x == nil {
		return synchook.GlobalStats{}
	}
	return synchook.GlobalStats{Rounds: x.rounds.Load(), Failed: x.failed.Load(), Keys: x.keys.Load(), RTT: time.Duration(x.rtt.Load())}
}

func newExchanger(s *syncer) *exchanger {
	g := s.cfg.Global
	return &exchanger{s: s, global: g.Client, region: g.Region, every: g.Interval, limit: g.Timeout}
}

// loop runs a round every period while this node leads, until stop,
// which also ends a round under way.
func (x *exchanger) loop(stop <-chan struct{}) {
	defer x.s.loops.Done()
	tick := time.NewTicker(x.every)
	defer tick.Stop()
	base, end := context.WithCancel(context.Background())
	defer end()
	go func() {
		select {
		case <-stop:
			end()
		case <-base.Done():
		}
	}()
	// A node that does not lead asks for the lock once a second or so: it
	// lasts three rounds, and the leader renews it every round. The first
	// try is at once: a region new to the store registers without delay.
	wait := x.tick(base)
	for {
		select {
		case <-stop:
			ctx, cancel := context.WithTimeout(context.Background(), x.every)
			scriptResign.Run(ctx, x.s.cfg.Client, []string{x.s.ks.regionKey(regionLock)}, x.s.node)
			cancel()
			return
		case <-tick.C:
			if wait > 0 {
				wait--
				continue
			}
			wait = x.tick(base)
		}
	}
}

// tick runs a round if this node leads, taking the lock when free; it
// returns how many ticks to skip before the next try.
func (x *exchanger) tick(base context.Context) int {
	ctx, cancel := context.WithTimeout(base, x.every+x.limit)
	defer cancel()
	if !x.lead(ctx) {
		return int(time.Second / x.every)
	}
	x.register(ctx)
	x.rounds.Add(1)
	if err := x.round(ctx); err != nil {
		x.failed.Add(1)
	}
	return 0
}

// lead reports whether this node holds the region's lock, taking it when
// free: it lasts three rounds.
func (x *exchanger) lead(ctx context.Context) bool {
	c := x.s.cfg.Client
	ttl := (3 * (x.every + x.limit)).Milliseconds()
	keys := []string{x.s.ks.regionKey(regionLock), x.s.ks.regionKey(regionActive)}
	v, err := scriptLead.Run(ctx, c, keys, x.s.node, ttl, standingKeep.Microseconds()).Int()
	return err == nil && v == 1
}

// registerEvery is how often the exchanger tells the global store of its
// region, and regionsLive how long a region counts there after: the count
// sizes a new key's opening in every region, and a region that stopped
// counts as long as the store keeps its standing shares.
const (
	registerEvery = time.Second
	regionsLive   = standingKeep
)

// register tells the global store of the region, at most every
// registerEvery, and writes the regions it counts where the registry
// hands them to every node of the region.
func (x *exchanger) register(ctx context.Context) {
	if time.Since(x.registered) < registerEvery {
		return
	}
	gctx, cancel := context.WithTimeout(ctx, x.limit)
	n, err := scriptRegions.Run(gctx, x.global, []string{x.s.ks.storeRegionsKey()}, x.region, regionsLive.Microseconds()).Int64()
	cancel()
	if err != nil {
		return
	}
	x.registered, x.regions = time.Now(), n
	x.s.cfg.Client.Set(ctx, x.s.ks.regionsKey(), n, 3*regionsLive)
}

// round exchanges every key of the region's set, a batch at a time, the
// most recently used first: a round that runs out of time leaves the keys
// idle longest.
func (x *exchanger) round(ctx context.Context) error {
	c := x.s.cfg.Client
	set := x.s.ks.regionKey(regionActive)
	var first error
	var keys int64
	defer func() { x.keys.Store(keys) }()
	births := true // with the first batch, or alone
	for start := int64(0); ; start += exchangeBatch {
		names, err := c.ZRevRange(ctx, set, start, start+exchangeBatch-1).Result()
		if err != nil {
			return err
		}
		if len(names) == 0 {
			if births {
				_, first = x.batch(ctx, nil, true)
			}
			return first
		}
		gone, err := x.batch(ctx, names, births)
		births = false
		if err != nil && first == nil {
			first = err
		}
		keys += int64(len(names) - len(gone))
		if len(gone) > 0 {
			c.ZRem(ctx, set, gone...)
			start -= int64(len(gone))
		}
		if len(names) < exchangeBatch {
			return first
		}
	}
}

// regionRead is lua/region.lua's 'r' reply.
type regionRead struct {
	fp                                           string
	now, window, w, demand, r, used, held, rNext int64
	heldNext, standing                           int64
	opening                                      bool // the part held is the region's opening: no answer yet
}

// batch exchanges the keys names: reads them in the region, asks the
// global store, writes its answers back; and, with births, the store's
// births (births.go). It returns the keys whose state is gone.
func (x *exchanger) batch(ctx context.Context, names []string, births bool) ([]any, error) {
	c := x.s.cfg.Client
	look := 2*x.every + 2*time.Duration(x.rtt.Load())
	var cmds []*redis.Cmd
	if len(names) > 0 {
		reads := make([]call, len(names))
		for i, n := range names {
			reads[i] = call{scriptRegion, []string{n, sideOf(n)}, []any{"r", "", appendNumbers(nil, look.Microseconds(), x.s.cfg.DemandTTL.Microseconds(), int64(boolFlag(x.reached)))}}
		}
		var err error
		cmds, err = runPipelined(ctx, c, c.Pipeline, reads)
		if err != nil && len(cmds) == 0 {
			return nil, wrap(ctx, "region", err)
		}
	}
	var gone []any
	var keys []string
	var rs []regionRead
	var asks []call
	var wants []int64
	for i, cmd := range cmds {
		v, err := cmd.Slice()
		if err != nil {
			continue
		}
		r, ok := decodeRegionRead(v)
		if !ok {
			gone = append(gone, names[i])
			continue
		}
		keys, rs = append(keys, names[i]), append(rs, r)
		args, want := x.ask(r, look)
		asks, wants = append(asks, call{scriptGlobal, []string{globalKey(names[i])}, args}), append(wants, want)
	}
	answers, announced := len(asks), 0
	if births {
		b, n := x.birthsCall()
		asks, announced = append(asks, b), n
	}
	if len(asks) == 0 {
		return gone, nil
	}
	gctx, cancel := context.WithTimeout(ctx, x.limit)
	sent := time.Now()
	gcmds, gerr := runPipelined(gctx, x.global, x.global.Pipeline, asks)
	cancel()
	x.reached = gerr == nil
	if gerr == nil {
		x.measure(time.Since(sent))
	}
	// Each answer the store gave is written back, whatever became of the
	// others (a Cluster store with a master down answers for the rest):
	// the store has recorded it.
	writes := make([]call, 0, len(gcmds))
	if births && len(gcmds) > answers {
		writes = append(writes, x.applyBirths(gcmds[answers], announced)...)
	}
	for i, cmd := range gcmds[:min(answers, len(gcmds))] {
		if w, ok := x.answer(cmd, keys[i], rs[i], wants[i]); ok {
			writes = append(writes, w)
		}
	}
	if len(writes) > 0 {
		if _, err := runPipelined(ctx, c, c.Pipeline, writes); err != nil {
			return gone, wrap(ctx, "region", err)
		}
	}
	if gerr != nil {
		return gone, wrap(gctx, "global", gerr)
	}
	return gone, nil
}

// answer reads the store's answer to the ask of key, read as r, that
// wanted want; it returns the write of the answer into the region, unless
// there is nothing to write (an error, or an ask older than one answered).
func (x *exchanger) answer(cmd *redis.Cmd, key string, r regionRead, want int64) (call, bool) {
	v, err := cmd.Int64Slice()
	if err != nil || len(v) != 8 || v[1] < 0 {
		return call{}, false
	}
	if v[7] == 1 {
		x.announce = append(x.announce, key)
	}
	left := v[4]
	if want <= v[1] || v[6] > 0 || r.demand <= 0 {
		// The window is not spent for the region (its part final) when
		// it got what it asked for (under the limit the standing shares
		// of the regions yet to ask may fill it), nor while the others
		// hold more than their part by demand, or openings kept, which
		// may come back; nor while its own demand is not measured yet,
		// which entitles it to nothing: a region that had the key alone
		// holds all of L until the others' demands show.
		left = max(left, 1)
	}
	return call{scriptRegion, []string{key, sideOf(key)},
		[]any{"w", "", appendNumbers(nil, r.window, v[1], r.window+r.w, v[2], v[3], left, keepFor(r.w).Microseconds(), r.now, v[5])}}, true
}

// ask is the global store's call for the key r read: its demand, what it
// holds and uses in the window, what it wants there (two lookaheads of its
// demand beyond its use, and, when its nodes hold all its part, twice
// that part: a demand not yet measured, a new key's, grows it by half at
// each round), and in the next window, once that opens within a lookahead
// and a round.
func (x *exchanger) ask(r regionRead, look time.Duration) (args []any, want int64) {
	ahead := ceilDiv(r.demand*look.Microseconds(), r.w)
	want = r.used + 2*ahead
	if r.r >= r.held {
		want = max(want, 2*r.held, r.held+max(ahead, 1))
	}
	wantNext := int64(0)
	if r.now >= r.window+r.w-look.Microseconds()-x.every.Microseconds() {
		wantNext = max(2*ahead, r.heldNext)
	}
	// A restarted store hears from every region within a round's bound
	// and a few rounds; until then the regions keep their standing shares.
	// A region that opened a new key asks within a round and its bound.
	fresh, open := 2*x.limit+5*x.every, x.limit+2*x.every
	keep := keepFor(r.w)
	return []any{"", x.region, r.fp, appendNumbers(nil, r.demand, r.window, r.held, r.r, want,
		r.window+r.w, r.heldNext, wantNext, r.standing, fresh.Microseconds(), keep.Microseconds(), look.Microseconds(), r.now,
		int64(boolFlag(r.opening)), x.regions, open.Microseconds())}, want
}

// measure folds a round trip to the global store into the smoothed one.
func (x *exchanger) measure(d time.Duration) {
	if !x.measured {
		x.measured = true // the first dials, and loads the script
		return
	}
	old := x.rtt.Load()
	if old == 0 {
		x.rtt.Store(int64(d))
		return
	}
	x.rtt.Store(old + (int64(d)-old)/8)
}

func decodeRegionRead(v []any) (regionRead, bool) {
	if len(v) != 13 {
		return regionRead{}, false
	}
	fp, ok := v[1].(string)
	if !ok {
		return regionRead{}, false
	}
	n := make([]int64, 11)
	for i := range n {
		x, ok := v[i+2].(int64)
		if !ok {
			return regionRead{}, false
		}
		n[i] = x
	}
	return regionRead{fp: fp, now: n[0], window: n[1], w: n[2], demand: n[3], r: n[4], used: n[5],
		held: n[6], rNext: n[7], heldNext: n[8], standing: n[9], opening: n[10] == 1}, true
}

func ceilDiv(a, b int64) int64 {
	if b <= 0 {
		return 0
	}
	return int64(math.Ceil(float64(a) / float64(b)))
}
