package accuracy

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testW = int64(10_000_000) // the workload's window, µs

// ev returns a timed event of key at t (µs since T0), admitted or not.
func ev(key uint32, t int64, allowed bool) timed {
	e := Event{Key: key, Start: uint32(t), End: uint32(t)}
	if allowed {
		e.Flags |= evAllowed
	}
	return timed{Event: e, T: t}
}

func TestFalseRefusalsEdgeAndWindows(t *testing.T) {
	W := testW
	edge := EdgeMargin.Microseconds()
	evs := []timed{
		ev(1, W/2, false),          // the warm-up window: not measured
		ev(1, W+500, false),        // within 1 ms of window 1's start: left out
		ev(1, W+5000, false),       // refused where the replay admits: 1
		ev(1, W+6000, true),        //
		ev(2, W+7000, true),        // admitted where the replay refuses,
		ev(2, W+8000, false),       // refused where it admits: the key's window evens out
		ev(1, 2*W-300, false),      // within 1 ms of window 1's end: left out
		ev(1, 2*W+edge, false),     // 1 ms into window 2: counted, refused where the replay admits
		ev(1, 3*W+5000, false),     // past the measured windows
		ev(3, 2*W+W/2, false),      // refused by both
		ev(3, 2*W+W/2+1000, false), //
	}
	exact := []bool{true, true, true, true, false, true, true, true, true, false, false}
	s := falseRefusals(evs, exact, W, 1, 2, edge)
	assert.EqualValues(t, 2, s.edge)
	assert.EqualValues(t, 7, s.counted)
	assert.EqualValues(t, 4, s.exact, "what the replay admits, edges left out")
	assert.EqualValues(t, 2, s.admitted)
	assert.EqualValues(t, 2, s.sum, "Σ max(0, exact − admitted) per key and window")

	// With no margin, the edge requests count too.
	s = falseRefusals(evs, exact, W, 1, 2, 0)
	assert.EqualValues(t, 4, s.sum)
	assert.EqualValues(t, 0, s.edge)
}

func TestExactReplayLimitChange(t *testing.T) {
	st := streamOf(streamIndex(PatChange, AlgoFixed))
	require.Equal(t, []int64{100, 200, 50}, PatPhases)
	W := testW
	var evs []timed
	add := func(key uint32, at int64, phase uint8, node uint8) {
		e := ev(key, at, true)
		e.Phase, e.Node = phase, node
		evs = append(evs, e)
	}
	// Key 0: the first limit's 100, all at phase 0.
	for i := range 100 {
		add(0, W+int64(i), 0, 0)
	}
	add(0, W+200, 0, 1) // node 1 has not raised the limit yet: refused
	add(0, W+300, 1, 0) // node 0 has: admitted, 101 ≤ 200
	add(0, W+400, 2, 0) // lowered to 50: the count is clamped to 50, refused
	// Key 1, under the lowered limit only: 50 admitted, the 51st refused.
	for i := range 51 {
		add(1, 2*W+int64(i), 2, 0)
	}
	exact, err := exactReplay(0, st, evs)
	require.NoError(t, err)
	for i := range 100 {
		require.True(t, exact[i], "request %d", i)
	}
	assert.False(t, exact[100], "node 1's request under the old limit")
	assert.True(t, exact[101], "node 0's request under the raised limit")
	assert.False(t, exact[102], "under the lowered limit")
	for i := range 50 {
		require.True(t, exact[103+i], "key 1, request %d", i)
	}
	assert.False(t, exact[153])
}

func TestExactReplayTwoRules(t *testing.T) {
	st := streamOf(streamIndex(PatMulti, AlgoFixed))
	require.EqualValues(t, 150, PatIPLimit)
	W := testW
	var evs []timed
	add := func(user, ip uint32, n int) {
		for range n {
			e := ev(user, W+int64(len(evs)), true)
			e.IP = ip
			evs = append(evs, e)
		}
	}
	add(1, 7, 101) // user 1's 100, then refused by its own rule: IP 7 not charged
	add(2, 7, 51)  // user 2 behind the same IP: 50 more, then refused by the IP's
	add(3, 8, 1)   // another IP
	exact, err := exactReplay(0, st, evs)
	require.NoError(t, err)
	for i := range 100 {
		require.True(t, exact[i], "user 1, request %d", i)
	}
	assert.False(t, exact[100], "user 1's 101st: its own rule")
	for i := range 50 {
		require.True(t, exact[101+i], "user 2, request %d: the IP was charged only what it admitted", i)
	}
	assert.False(t, exact[151], "user 2's 51st: the IP's rule")
	assert.True(t, exact[152])
}

func TestRetryCounts(t *testing.T) {
	W := testW
	retry := func(at int64, attempt uint8, allowed bool) timed {
		e := ev(5, at, allowed)
		e.Attempt = attempt
		return e
	}
	evs := []timed{
		retry(W/2, 1, false),                // the warm-up window: not counted
		retry(W+10, 0, false),               // a first try, not a retry
		retry(W+20, 1, false),               // refused again; the replay admits it
		retry(W+30, 2, true),                //
		retry(2*W, 1, false),                // at the window's edge: retries count wherever they fall
		retry(2*W+50, PatMaxRetries, false), // refused at its last retry: given up
	}
	exact := []bool{true, false, true, true, false, false}
	s := retryCounts(evs, exact, W, 1, 2)
	assert.Equal(t, retrySum{retries: 4, refused: 3, exactRefused: 2, gaveUp: 1}, s)
}

func TestNextRetry(t *testing.T) {
	const W, runEnd = float64(testW), 1e9
	c := RetryClient{Start: 0, End: 5e6, Rate: 100}
	a := patArrival{At: 1000, Key: 3, Want: 4, Stream: 4}

	next, ok := nextRetry(1, 8, c, a, false, 1200, 500, W, runEnd)
	require.True(t, ok)
	assert.EqualValues(t, 1700, next.At, "refused: the same request at its decision + RetryAfter")
	assert.EqualValues(t, 1, next.Attempt)
	assert.EqualValues(t, 4, next.Want)
	assert.Equal(t, retryNode(1, 4, 3, 4, 1, 8), int(next.Node))

	next, ok = nextRetry(1, 8, c, a, true, 1200, 0, W, runEnd)
	require.True(t, ok)
	gap := retryGap(1, 4, 3, 5, c.Rate, W)
	assert.EqualValues(t, uint32(max(1000+gap, 1200)), next.At, "a first try admitted: the next want a gap after its due time")
	assert.EqualValues(t, 5, next.Want)
	assert.Zero(t, next.Attempt)

	r := a
	r.Attempt = 3
	next, ok = nextRetry(1, 8, c, r, true, 90000, 0, W, runEnd)
	require.True(t, ok)
	assert.EqualValues(t, uint32(90000+gap), next.At, "a retry admitted: the next want a gap after it")

	r.Attempt = PatMaxRetries
	next, ok = nextRetry(1, 8, c, r, false, 90000, 100, W, runEnd)
	require.True(t, ok)
	assert.Zero(t, next.Attempt, "given up: on to the next want")
	assert.EqualValues(t, 5, next.Want)

	_, ok = nextRetry(1, 8, c, a, false, 1200, 500, W, 1500)
	assert.False(t, ok, "a retry past the run's end is not sent")
	late := RetryClient{Start: 0, End: 1100, Rate: 100}
	_, ok = nextRetry(1, 8, late, a, true, 1200, 0, W, runEnd)
	assert.False(t, ok, "no want past the session's end")
}

func TestReplayAt(t *testing.T) {
	W := testW
	e := Event{Start: uint32(W + 100), End: uint32(W + 900), Window: 1, Reset: uint32(W - 300)}
	assert.EqualValues(t, W+300, replayAt(e, AlgoFixed, false, W), "the limiter's clock: the window's end less ResetAfter")
	assert.EqualValues(t, W+300, replayAt(e, AlgoFixed, true, W))
	assert.EqualValues(t, W+100, replayAt(e, AlgoGCRA, false, W), "hybrid: the call")
	assert.EqualValues(t, W+500, replayAt(e, AlgoGCRA, true, W), "central: the middle of the round trip")
	e.Flags |= evWaited
	assert.EqualValues(t, W+900, replayAt(e, AlgoGCRA, false, W), "a wait: its return")
	e.Reset = 0
	assert.EqualValues(t, W+900, replayAt(e, AlgoFixed, false, W), "no ResetAfter: as the other algorithms")
}

func TestOverAdmissionFirstAndLater(t *testing.T) {
	W := testW
	st := streamOf(streamIndex(PatBurst, AlgoFixed))
	var evs []timed
	evs = append(evs, ev(9, W+1, false)) // the key's first window is 1
	for i := range 100 {
		evs = append(evs, ev(9, W+10+int64(i), true))
	}
	for i := range 103 {
		evs = append(evs, ev(9, 2*W+10+int64(i), true))
	}
	first, later, err := overAdmission(st, evs, W, 1, 2)
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.Len(t, later, 1)
	assert.InDelta(t, 0, first[0], 1e-9)
	assert.InDelta(t, 0.03, later[0], 1e-9)

	// GCRA, burst 10 at 10 per second: 12 at once is 2 past the curve, ÷ L.
	st = streamOf(streamIndex(PatBurst, AlgoGCRA))
	evs = evs[:0]
	for range 12 {
		evs = append(evs, ev(9, W+5, true))
	}
	first, _, err = overAdmission(st, evs, W, 1, 2)
	require.NoError(t, err)
	require.Len(t, first, 1)
	assert.InDelta(t, 2.0/PatLimit, first[0], 1e-9)
}

func TestPatternsPlan(t *testing.T) {
	s := NewPatternsSpec(ModeHybrid, 3)
	plan, clients := s.patternsPlan()
	plan2, _ := s.patternsPlan()
	require.Equal(t, plan, plan2, "the plan follows from the seed alone")
	end := uint32(s.Duration().Microseconds())
	perStream := make([]int, numStreams)
	changes := 0
	bursts := map[[2]uint32][]uint8{} // (stream, key) at its first instant: the nodes
	for i, a := range plan {
		if i > 0 {
			require.GreaterOrEqual(t, a.At, plan[i-1].At, "in time order at %d", i)
		}
		require.Less(t, a.At, end)
		if a.Change > 0 {
			changes++
			assert.Equal(t, uint8(allNodes), a.Node)
			assert.EqualValues(t, s.ChangeAt(int(a.Change)), a.At)
			continue
		}
		require.Less(t, int(a.Node), s.Nodes)
		perStream[a.Stream]++
		if streamOf(int(a.Stream)).pattern == PatBurst {
			k := [2]uint32{uint32(a.Stream), a.Key}
			if b := bursts[k]; len(b) == 0 || plan[i-1].At == a.At && plan[i-1].Key == a.Key {
				bursts[k] = append(b, a.Node)
			}
		}
	}
	assert.Equal(t, len(PatPhases)-1, changes)
	for st, n := range perStream {
		assert.Positive(t, n, "stream %v", streamOf(st))
	}
	for k, nodes := range bursts {
		c := patCapacity(streamOf(int(k[0])).algo)
		require.GreaterOrEqual(t, len(nodes), 1)
		require.LessOrEqual(t, len(nodes), c, "a burst is at most the capacity")
		for j := 1; j < len(nodes) && j < s.Nodes; j++ {
			assert.Equal(t, (int(nodes[0])+j)%s.Nodes, int(nodes[j]), "a burst goes to the nodes in turn")
		}
	}
	retry := streamIndex(PatRetry, AlgoFixed)
	require.NotEmpty(t, clients[retry])
	for _, c := range clients[retry] {
		assert.InDelta(t, float64(s.W()), c.End-c.Start, 1)
	}
	// Each node's schedule is its share and every change.
	total := 0
	for n := range s.Nodes {
		sched, _ := s.patternsSchedule(n)
		for _, a := range sched {
			if a.Change == 0 {
				total++
				require.Equal(t, n, int(a.Node))
			}
		}
	}
	assert.Equal(t, len(plan)-changes, total)
}

func TestEventsRoundTrip(t *testing.T) {
	evs := []Event{
		{Sched: 1, Start: 2, End: 3, Key: 4, IP: 5, Reset: 6, Retry: 7, Window: -1, Want: 8, Stream: 7, Flags: evAllowed | evWaited, Reason: 0x31, Phase: 2, Attempt: 9, Node: 7},
		{Key: 1 << 30},
	}
	p := filepath.Join(t.TempDir(), "n0.pat")
	require.NoError(t, WriteEvents(p, evs))
	got, err := ReadEvents(p)
	require.NoError(t, err)
	assert.Equal(t, evs, got)
	assert.True(t, got[0].Allowed())
	assert.True(t, got[0].Waited())
	assert.False(t, got[1].Allowed())

	var b [arrivalWire]byte
	a := patArrival{At: 1, Key: 2, IP: 3, Want: 4, Stream: 5, Node: 6, Change: 1, Attempt: 8}
	encodeArrival(b[:], a)
	assert.Equal(t, a, decodeArrival(b[:]))
}
