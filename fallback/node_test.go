package fallback

import (
	"bytes"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
)

var (
	testKey  = []byte("0123456789abcdef")
	otherKey = []byte("fedcba9876543210")
)

// fastMemberlist is DefaultLocalConfig on a free loopback port with
// intervals short enough for tests.
func fastMemberlist(name string) *memberlist.Config {
	c := memberlist.DefaultLocalConfig()
	c.Name, c.BindAddr, c.BindPort = name, "127.0.0.1", 0
	c.ProbeInterval = 50 * time.Millisecond
	c.ProbeTimeout = 25 * time.Millisecond
	c.GossipInterval = 10 * time.Millisecond
	c.PushPullInterval = 300 * time.Millisecond
	c.GossipToTheDeadTime = 500 * time.Millisecond
	c.SuspicionMult = 2
	c.TCPTimeout = 500 * time.Millisecond
	return c
}

func testConfig(name string, seeds ...string) config {
	return config{
		Memberlist:     fastMemberlist(name),
		Seeds:          seeds,
		RejoinInterval: 200 * time.Millisecond,
		Keys:           [][]byte{testKey},
		Label:          "test",
		Interval:       20 * time.Millisecond,
		DemandHalfLife: 200 * time.Millisecond,
		RecordTTL:      5 * time.Second,
	}
}

func start(t *testing.T, cfg config) *node {
	t.Helper()
	n, err := startNode(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// cluster starts size nodes joined to the first one.
func cluster(t *testing.T, size int, edits ...func(*config)) []*node {
	t.Helper()
	cfg := func(name string, seeds ...string) config {
		c := testConfig(name, seeds...)
		for _, e := range edits {
			e(&c)
		}
		return c
	}
	nodes := []*node{start(t, cfg("n0"))}
	for i := 1; i < size; i++ {
		nodes = append(nodes, start(t, cfg("n"+string(rune('0'+i)), nodes[0].Addr())))
	}
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if n.Stats().Members != size {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the nodes join")
	return nodes
}

// crash stops a node without leaving: its peers see it fail.
func crash(n *node) {
	n.closeOnce.Do(func() {
		n.closed.Store(true)
		close(n.stop)
		<-n.done
		n.closeErr = n.ml.Shutdown()
	})
}

func TestRecordsConverge(t *testing.T) {
	leakcheck.Check(t)
	nodes := cluster(t, 3)
	k := digest{42}
	// n0 sees three times the demand of each other node, and admits that.
	weights := []int64{3, 1, 1}
	require.Eventually(t, func() bool {
		for i, n := range nodes {
			n.Observe(k, 5, weights[i], weights[i])
		}
		var sum float64
		for _, n := range nodes {
			e := n.Estimate(k)
			if !e.Known || e.Members != 3 || e.Window != 5 {
				return false
			}
			sum += e.Share
		}
		e0, e1, e2 := nodes[0].Estimate(k), nodes[1].Estimate(k), nodes[2].Estimate(k)
		// Shares follow demand: about 0.95×3/5 + 0.05/3 and 0.95/5 + 0.05/3.
		return sum <= 1+1e-9 && sum > 0.95 &&
			e0.Share > 0.5 && e0.Share < 0.7 && e1.Share > 0.15 && e1.Share < 0.25 && e2.Share > 0.15 && e2.Share < 0.25
	}, 10*time.Second, 20*time.Millisecond, "demand shares converge")

	// Counts converge: stop observing and every node sees the same total.
	require.Eventually(t, func() bool {
		var own int64
		for _, n := range nodes {
			own += n.Estimate(k).Own
		}
		for _, n := range nodes {
			if n.Estimate(k).Total != own {
				return false
			}
		}
		return own > 0
	}, 10*time.Second, 20*time.Millisecond, "counts converge")
	// Each node's view of the others' demand lags its own by a gossip
	// round, so the shares may sum a little past one; once the views
	// converge too, the allowances fit the limit.
	var allowed int64
	assert.Eventually(t, func() bool {
		allowed = 0
		for _, n := range nodes {
			allowed += n.Estimate(k).Allowance(1_000_000)
		}
		return allowed <= 1_020_000
	}, 10*time.Second, 20*time.Millisecond, "allowances from the same counts fit the limit")
	t.Logf("allowances: %d of 1,000,000", allowed)
	for _, n := range nodes {
		st := n.Stats()
		assert.Positive(t, st.RecordsSent)
		assert.Positive(t, st.RecordsReceived)
		assert.Positive(t, st.BytesSent)
		assert.Positive(t, st.BytesReceived)
		assert.Zero(t, st.Malformed)
	}
}

func TestForeignNodeCannotJoinNorInject(t *testing.T) {
	leakcheck.Check(t)
	nodes := cluster(t, 2)
	a, b := nodes[0], nodes[1]

	wrongKey := testConfig("intruder")
	wrongKey.Keys = [][]byte{otherKey}
	f := start(t, wrongKey)
	_, err := f.Join(a.Addr())
	assert.Error(t, err, "a node with another key cannot join")

	wrongLabel := testConfig("stranger")
	wrongLabel.Label = "other"
	g := start(t, wrongLabel)
	_, err = g.Join(a.Addr())
	assert.Error(t, err, "a node with another label cannot join")

	// Both send a record straight to a, by packet and by stream.
	forged := digest{0xee}
	msg := appendRecord(nil, &record{origin: "intruder", key: forged, window: 1, seq: 1, consumed: 1 << 40, demand: 1e6})
	target := a.ml.LocalNode()
	for _, x := range []*node{f, g} {
		_ = x.ml.SendBestEffort(target, msg)
		_ = x.ml.SendReliable(target, msg)
	}
	// b, a member with the key, sends a marker the same ways: once it is
	// in, the forged record would have been too.
	marker := digest{0xaa}
	mark := appendRecord(nil, &record{origin: b.Name(), key: marker, window: 1, seq: 1, consumed: 1, demand: 1})
	require.NoError(t, b.ml.SendReliable(target, mark))
	require.Eventually(t, func() bool { return a.Estimate(marker).Known }, 10*time.Second, 10*time.Millisecond)

	assert.False(t, a.Estimate(forged).Known, "the forged record got in")
	assert.Equal(t, 2, a.Stats().Members)
	assert.Equal(t, 1, f.Stats().Members)
	assert.Equal(t, 1, g.Stats().Members)
}

// slowSuspicion makes memberlist suspect a failed node for about half a
// second before declaring it dead, long enough to watch.
func slowSuspicion(c *config) { c.Memberlist.SuspicionMult = 10 }

func TestDeadNodeSharesGrow(t *testing.T) {
	leakcheck.Check(t)
	logs := &logLines{}
	nodes := cluster(t, 3, slowSuspicion, func(c *config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	k := digest{7}
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			n.Observe(k, 1, 1, 1)
		}
		for _, n := range nodes {
			if e := n.Estimate(k); e.Members != 3 || e.Share < 0.3 || e.Share > 0.37 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "even demand splits evenly")
	before := nodes[0].Estimate(k).Total

	crash(nodes[2])
	sawSuspect := false
	require.Eventually(t, func() bool {
		for _, n := range nodes[:2] {
			n.Observe(k, 1, 1, 1)
		}
		suspected, dead := logs.has("Suspect n2"), logs.has("Marking n2 as failed")
		if suspected && !dead {
			sawSuspect = true
			for _, n := range nodes[:2] {
				assert.Equal(t, 3, n.Estimate(k).Members, "a suspected member shrank the count")
			}
		}
		for _, n := range nodes[:2] {
			if e := n.Estimate(k); e.Members != 2 || e.Share < 0.45 {
				return false
			}
		}
		return dead
	}, 15*time.Second, 5*time.Millisecond, "once the node is dead the others' shares grow")
	assert.True(t, sawSuspect, "the crashed node was never seen suspected")
	assert.GreaterOrEqual(t, nodes[0].Estimate(k).Total, before, "the dead node's count still counts")
}

func TestLeaveAndClose(t *testing.T) {
	leakcheck.Check(t)
	nodes := cluster(t, 3)
	require.NoError(t, nodes[2].Close())
	require.NoError(t, nodes[2].Close(), "Close is idempotent")
	_, err := nodes[2].Join(nodes[0].Addr())
	assert.ErrorIs(t, err, errClosed)
	require.Eventually(t, func() bool {
		return nodes[0].Stats().Members == 2 && nodes[0].Estimate(digest{1}).Members == 2 && nodes[1].Stats().Members == 2
	}, 10*time.Second, 10*time.Millisecond, "a node that leaves stops counting")
}

func TestRejoinSeeds(t *testing.T) {
	leakcheck.Check(t)
	// b starts before its seed is up: the first join fails, and the
	// rejoin loop joins the seed once it listens.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	b := start(t, testConfig("b", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))))
	require.Equal(t, 1, b.Stats().Members)

	cfg := testConfig("a")
	cfg.Memberlist.BindPort = port
	a := start(t, cfg)
	require.Eventually(t, func() bool { return a.Stats().Members == 2 && b.Stats().Members == 2 }, 10*time.Second, 10*time.Millisecond)
}

func TestLogsGoToLogger(t *testing.T) {
	leakcheck.Check(t)
	logs := &logLines{}
	cfg := testConfig("logged")
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := start(t, cfg)
	start(t, testConfig("peer", a.Addr()))
	require.Eventually(t, func() bool { return logs.has("component=memberlist") }, 10*time.Second, 10*time.Millisecond)
}

// logLines keeps log output for a test to search.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Contains(l.buf.Bytes(), []byte(s))
}

// bare returns a node without memberlist or loop, for the parts that need
// no network.
func bare(t *testing.T, name string, edit func(*config)) *node {
	t.Helper()
	cfg := testConfig(name)
	if edit != nil {
		edit(&cfg)
	}
	c := cfg.withDefaults()
	require.NoError(t, c.validate())
	return newNode(c, name, 4)
}

func TestPacketsHottestFirstAndBounded(t *testing.T) {
	n := bare(t, "hot", func(c *config) { c.MaxQueued = 100 })
	const keys = 3000
	for i := range keys {
		n.Observe(digest{byte(i), byte(i >> 8)}, 1, int64(i+1), 1)
	}
	n.publish(time.Now(), 1)
	require.Equal(t, 100, n.queue.NumQueued())
	d := delegate{n}
	const limit, overhead = 1400, 3
	got := 0
	for {
		msgs := d.GetBroadcasts(overhead, limit)
		if len(msgs) == 0 {
			break
		}
		size := 0
		for _, m := range msgs {
			size += len(m) + overhead
			r, err := decodeRecord(m)
			require.NoError(t, err)
			i := int(r.key[0]) | int(r.key[1])<<8
			assert.GreaterOrEqual(t, i, keys-100, "a key outside the hottest 100 was queued")
			got++
		}
		assert.LessOrEqual(t, size, limit)
		require.LessOrEqual(t, got, 10_000, "records taken from the queue: it drains within 10,000")
	}
	assert.Positive(t, got)
	// Local state for push/pull is bounded too, hottest first.
	n2 := bare(t, "state", func(c *config) { c.MaxStateRecords = 50 })
	own := n.own.Load()
	require.NotNil(t, own)
	d2 := delegate{n2}
	d2.MergeRemoteState(delegate{n}.LocalState(false), false)
	n2.rebuild(time.Now())
	recs, err := decodeState(delegate{n2}.LocalState(false))
	require.NoError(t, err)
	assert.Len(t, recs, 50)
	for _, r := range recs {
		i := int(r.key[0]) | int(r.key[1])<<8
		assert.GreaterOrEqual(t, i, keys-100, "state sends the hottest first")
	}
}

func TestPushPullRepairs(t *testing.T) {
	a, b := bare(t, "a", nil), bare(t, "b", nil)
	k := digest{9}
	a.Observe(k, 3, 10, 4)
	a.publish(time.Now(), 1)
	// b never saw a's broadcast; the state exchange brings the record.
	delegate{b}.MergeRemoteState(delegate{a}.LocalState(false), true)
	// b treats a as a member only once memberlist says so; here, bare, the
	// count is what matters.
	b.rebuild(time.Now())
	e := b.Estimate(k)
	require.True(t, e.Known)
	assert.Equal(t, int64(4), e.Total)
	assert.Equal(t, int64(0), e.Own)
	assert.Equal(t, int64(3), e.Window)

	// An older record does not replace a newer one; malformed state is
	// counted and does not panic.
	before := b.Stats().RecordsReceived
	delegate{b}.MergeRemoteState(delegate{a}.LocalState(false), false)
	assert.Equal(t, before, b.Stats().RecordsReceived)
	delegate{b}.MergeRemoteState([]byte{msgState, 9, 1, 2}, false)
	delegate{b}.NotifyMsg([]byte{msgRecord})
	assert.Equal(t, uint64(2), b.Stats().Malformed)
}

func TestRecordsExpire(t *testing.T) {
	b := bare(t, "b", nil)
	k := digest{3}
	require.True(t, b.receive(record{origin: "a", key: k, window: 1, seq: 1, consumed: 2, demand: 1}, time.Now().UnixNano()))
	b.expire(time.Now())
	b.rebuild(time.Now())
	assert.True(t, b.Estimate(k).Known)
	b.expire(time.Now().Add(b.cfg.RecordTTL + time.Second))
	b.rebuild(time.Now())
	assert.False(t, b.Estimate(k).Known)
	assert.Zero(t, b.nrec)
}

func TestKeyRotation(t *testing.T) {
	leakcheck.Check(t)
	nodes := cluster(t, 2)
	for _, n := range nodes {
		require.NoError(t, n.Keyring().AddKey(otherKey))
	}
	for _, n := range nodes {
		require.NoError(t, n.Keyring().UseKey(otherKey))
	}
	for _, n := range nodes {
		require.NoError(t, n.Keyring().RemoveKey(testKey))
	}
	old := testConfig("old")
	stale := start(t, old)
	_, err := stale.Join(nodes[0].Addr())
	assert.Error(t, err, "the retired key still joins")

	cfg := testConfig("new")
	cfg.Keys = [][]byte{otherKey}
	fresh := start(t, cfg)
	_, err = fresh.Join(nodes[0].Addr())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return nodes[1].Stats().Members == 3 }, 10*time.Second, 10*time.Millisecond)
}

// TestKeyRotationByRestart: the keyring also rotates by three rolling
// restarts, as docs/operating.md tells users to do it: the new key after
// the old, then first, then alone, each on every node before the next. A
// node restarted on each step joins the other.
func TestKeyRotationByRestart(t *testing.T) {
	leakcheck.Check(t)
	steps := [][][]byte{{testKey}, {testKey, otherKey}, {otherKey, testKey}, {otherKey}}
	cfg := func(name string, keys [][]byte, seeds ...string) config {
		c := testConfig(name, seeds...)
		c.Keys = keys
		return c
	}
	a := start(t, cfg("a", steps[0]))
	b := start(t, cfg("b", steps[0], a.Addr()))
	require.Eventually(t, func() bool { return b.Members() == 2 }, 10*time.Second, 10*time.Millisecond, "b joins a")
	for i, keys := range steps[1:] {
		require.NoError(t, a.Close())
		a = start(t, cfg("a", keys, b.Addr()))
		require.Eventually(t, func() bool { return a.Members() == 2 }, 10*time.Second, 10*time.Millisecond, "step %d: a joins b", i+1)
		require.NoError(t, b.Close())
		b = start(t, cfg("b", keys, a.Addr()))
		require.Eventually(t, func() bool { return b.Members() == 2 }, 10*time.Second, 10*time.Millisecond, "step %d: b joins a", i+1)
	}
}
