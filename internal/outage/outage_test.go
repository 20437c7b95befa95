package outage_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/outage"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// The process tests: node processes (internal/cmd/gossipnode) against a
// real redis-server the test starts, killed or stopped mid-run. They need
// the go tool and redis-server, and never skip: make test provides both.

var key = []byte("0123456789abcdef0123456789abcdef")

// build compiles gossipnode into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "gossipnode")
	cmd := exec.Command("go", "build", "-o", exe, "github.com/hybridlimit/hybridlimit/internal/cmd/gossipnode")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Run(), "go build gossipnode")
	return exe
}

func startRedis(t *testing.T) *redisproc.Redis {
	t.Helper()
	r, err := redisproc.Start(t.TempDir())
	require.NoError(t, err, "start redis-server")
	t.Cleanup(r.Close)
	return r
}

// cluster starts a node per rate, the first one the others' seed.
type cluster struct {
	t     *testing.T
	exe   string
	redis *redisproc.Redis
	base  outage.Spec
	procs []*outage.Proc
}

func (c *cluster) start(name string, rate float64, d time.Duration) *outage.Proc {
	c.t.Helper()
	s := c.base
	s.Name, s.Rate, s.Duration = name, rate, d
	if len(c.procs) > 0 {
		s.Seeds = []string{c.procs[0].Gossip}
	}
	p, err := outage.Start(c.exe, s)
	require.NoError(c.t, err)
	c.t.Cleanup(p.Kill)
	c.procs = append(c.procs, p)
	return p
}

// sleepUntil sleeps until t: the process tests follow a wall-clock
// timeline, since the nodes and Redis run on real time.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// TestOutageProcesses: three node processes, 95% of a key's traffic on one,
// Redis killed for three windows and restarted empty; a fourth node joins
// during the outage and a third is killed. The Gossip mode keeps about
// the limit per window, well above the even split's; nothing fails because
// of Redis; after Redis returns no window passes the limit by more than a
// few percent, and Redis holds what the nodes admitted in the window it
// came back in.
func TestOutageProcesses(t *testing.T) {
	exe := build(t)
	rd := startRedis(t)
	const L = 600
	W := time.Second
	c := &cluster{t: t, exe: exe, redis: rd, base: outage.Spec{
		Redis: rd.Addr, Prefix: "po", Key: key, Nodes: 3, Limit: L, Window: W,
		Modes: []string{outage.ModeFallback, outage.ModeFailLocal}, ProbeInterval: 200 * time.Millisecond, SuspicionMult: 2, Tuned: true,
	}}
	// Start so that windows begin 0.5s after the nodes are up.
	t0 := time.Now().Truncate(W).Add(W + W/2)
	sleepUntil(t0.Add(-W / 2))
	total := 10 * W
	c.start("a", 1900, total)
	c.start("b", 80, total)
	victim := c.start("c", 20, total)
	start := time.Now().Truncate(W).Add(W) // the first whole window
	kill, back := start.Add(3*W+W/10), start.Add(6*W+W/10)
	sleepUntil(kill)
	rd.Kill()
	sleepUntil(kill.Add(W + W/5))
	c.start("d", 80, time.Until(start.Add(total))-W)
	sleepUntil(kill.Add(2*W + W/10))
	victim.Kill()
	sleepUntil(back)
	require.NoError(t, rd.Restart())
	// Redis keeps three windows' slots, and the script of window w resets
	// the slot of w + 1: read window +6 in +7.
	sleepUntil(start.Add(7*W + W/2))
	ks := syncer.Keyspace{Prefix: "po:" + outage.ModeFallback}
	used := redisUsed(t, rd.Addr, ks, start.UnixMicro()/W.Microseconds()+6, W)
	for _, p := range c.procs {
		if p != victim {
			require.NoError(t, p.Wait())
		}
	}
	wins := outage.Windows(c.procs...)
	ids := sorted(wins[outage.ModeFallback])
	w0 := start.UnixMicro() / W.Microseconds()
	for _, mode := range []string{outage.ModeFallback, outage.ModeFailLocal} {
		for _, id := range ids {
			l := wins[mode][id]
			t.Logf("%-10s window %+d: offered %5d admitted %4d (%.2f × L) failed %d max latency %v", mode, id-w0, l.Offered, l.Admitted, float64(l.Admitted)/L, l.Failed, time.Duration(l.MaxLatency))
			assert.Zero(t, l.Failed, "%s window %+d: no request fails because of Redis", mode, id-w0)
		}
	}
	fb, fl := wins[outage.ModeFallback], wins[outage.ModeFailLocal]
	// The outage's whole windows: 4, 5 (3 is the one Redis dies in).
	for _, id := range []int64{w0 + 4, w0 + 5} {
		assert.InDelta(t, L, fb[id].Admitted, 0.15*L, "Gossip in outage window %+d", id-w0)
		assert.Greater(t, fb[id].Admitted, fl[id].Admitted+L/5, "Gossip above the even split with skewed traffic, window %+d", id-w0)
	}
	for _, id := range []int64{w0 + 3, w0 + 6} {
		assert.InDelta(t, L, fb[id].Admitted, 0.25*L, "Gossip in window %+d, where Redis dies or returns", id-w0)
	}
	for _, id := range ids {
		if id >= w0+6 && id < w0+9 {
			assert.LessOrEqual(t, fb[id].Admitted, int64(L*106/100), "after Redis returns, window %+d", id-w0)
		}
	}
	// Members: four once d joined, three once memberlist declared c dead.
	var members []int
	for _, l := range c.procs[0].Lines() {
		if l.Mode == outage.ModeFallback && l.Window >= w0+3 && l.Window <= w0+7 {
			members = append(members, l.Members)
		}
	}
	t.Logf("gossip members seen by node a, windows +3..+7: %v", members)
	assert.Contains(t, members, 4, "the joining node is a member")
	assert.Equal(t, 3, members[len(members)-1], "the killed node is declared dead")
	// Redis holds what the living nodes admitted in the window it returned
	// in (hand-back), nothing lost and nothing twice.
	var admitted int64
	for _, p := range c.procs {
		for _, l := range p.Lines() {
			if l.Mode == outage.ModeFallback && l.Window == w0+6 {
				admitted += l.Admitted
			}
		}
	}
	t.Logf("window +6: nodes admitted %d, Redis holds %d", admitted, used)
	// The nodes count by their clock's windows, the leases by their estimate
	// of Redis's clock: a few milliseconds' worth of requests at the edges
	// may fall on either side.
	assert.InDelta(t, admitted, used, 0.03*L, "Redis's count of the window Redis returned in is what the nodes admitted")
}

// TestPausedRedisProcesses: Redis stopped (SIGSTOP) for three windows:
// decisions go on without error and the limit holds; the slowest decision
// per window is logged, not asserted (a timed assertion would be flaky on
// a loaded machine; the outage benchmark reports it).
func TestPausedRedisProcesses(t *testing.T) {
	exe := build(t)
	rd := startRedis(t)
	const L = 600
	W := time.Second
	c := &cluster{t: t, exe: exe, redis: rd, base: outage.Spec{
		Redis: rd.Addr, Prefix: "pp", Key: key, Nodes: 3, Limit: L, Window: W, Modes: []string{outage.ModeFallback}, Tuned: true,
	}}
	total := 7 * W
	for i, r := range []float64{1000, 500, 500} {
		c.start(string(rune('a'+i)), r, total)
	}
	start := time.Now().Truncate(W).Add(W)
	stop, back := start.Add(2*W+W/10), start.Add(5*W+W/10)
	sleepUntil(stop)
	rd.Pause()
	sleepUntil(back)
	rd.Resume()
	for _, p := range c.procs {
		require.NoError(t, p.Wait())
	}
	wins := outage.Windows(c.procs...)[outage.ModeFallback]
	w0 := start.UnixMicro() / W.Microseconds()
	for _, id := range sorted(wins) {
		l := wins[id]
		t.Logf("window %+d: offered %5d admitted %4d (%.2f × L) failed %d max latency %v", id-w0, l.Offered, l.Admitted, float64(l.Admitted)/L, l.Failed, time.Duration(l.MaxLatency))
		assert.Zero(t, l.Failed)
		if id >= w0+3 && id <= w0+4 {
			// With the traffic spread over the nodes, each one's estimate of
			// the others' counts lags its own by a gossip round: the window
			// admits about (1 − share) × rate × that lag more than the
			// limit (docs/outage.md).
			assert.InDelta(t, L, l.Admitted, 0.2*L, "window %+d, Redis stopped", id-w0)
		}
		if id >= w0+5 && id < w0+7 {
			assert.LessOrEqual(t, l.Admitted, int64(L*106/100), "window %+d, after Redis resumed", id-w0)
		}
	}
}

func sorted[V any](m map[int64]V) []int64 {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// redisUsed sums the nodes' reported use of window wid (an id: start ÷ W)
// of the fixed-window key "k" of rule "r", on the server at addr.
func redisUsed(t *testing.T, addr string, ks syncer.Keyspace, wid int64, w time.Duration) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	return usedIn(t, c, ks, wid, w)
}
