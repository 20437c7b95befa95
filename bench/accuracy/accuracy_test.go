package accuracy

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

func TestScheduleDeterministicAndPoisson(t *testing.T) {
	s := NewSpec(ModeHybrid, AlgoFixed, WorkSkewed, 1000, 4, 9)
	a, b := s.Schedule(0), s.Schedule(0)
	require.NotEmpty(t, a, "a schedule")
	require.Len(t, b, len(a), "schedules of one (seed, node): their arrivals")
	require.Equal(t, a[len(a)/2], b[len(b)/2], "schedules of one (seed, node): their middle arrivals")
	total := 0
	for n := range s.Nodes {
		sched := s.Schedule(n)
		for i := 1; i < len(sched); i++ {
			require.GreaterOrEqual(t, sched[i].At, sched[i-1].At, "node %d: arrivals in order at %d", n, i)
		}
		want := s.Offered * float64(s.Limit) * s.Share(n) * s.Duration().Seconds()
		assert.InDelta(t, want, float64(len(sched)), 5*math.Sqrt(want), "node %d: arrivals", n)
		total += len(sched)
	}
	assert.InDelta(t, 0.8, float64(len(s.Schedule(0)))/float64(total), 0.01, "skewed: node 0's share of the traffic")
}

func TestScheduleCold(t *testing.T) {
	for _, w := range []string{WorkCold, WorkColdSkewed} {
		s := NewSpec(ModeHybrid, AlgoFixed, w, 100, 4, 4)
		W := uint32(s.W())
		counts := make([]int, s.Nodes)
		for n := range s.Nodes {
			for _, a := range s.Schedule(n) {
				counts[n]++
				start := uint32(float64(a.Key)*float64(W) + ColdAt*float64(W))
				require.GreaterOrEqual(t, a.At, start, "%s: key %d at %d µs: outside its second [%d, %d)", w, a.Key, a.At, start, start+W)
				require.Less(t, a.At, start+W, "%s: key %d at %d µs: outside its second [%d, %d)", w, a.Key, a.At, start, start+W)
			}
		}
		total := 0
		for _, c := range counts {
			total += c
		}
		want := 0.25
		if w == WorkColdSkewed {
			want = 0.8
		}
		assert.InDelta(t, want, float64(counts[0])/float64(total), 0.03, "%s: node 0's share of the traffic", w)
	}
}

func TestScheduleZipf(t *testing.T) {
	old := ZipfRate
	defer func() { ZipfRate = old }()
	ZipfRate = 20000
	s := NewSpec(ModeHybrid, AlgoFixed, WorkZipf, DefaultLimit, 8, 2)
	hot, n := 0, 0
	for node := range s.Nodes {
		for _, a := range s.Schedule(node) {
			n++
			if a.Key == 0 {
				hot++
			}
			require.Less(t, a.Key, uint32(ZipfKeys), "key out of range")
		}
	}
	assert.InDelta(t, 0.135, float64(hot)/float64(n), 0.015, "the hottest key's share of the traffic")
}

func TestRecordRoundTrip(t *testing.T) {
	recs := []Record{
		NewRecord(1, 2, 99999, true, 0, 3),
		NewRecord(4, 5, 0, false, uint8(local.ReasonNoLease), -1),
	}
	p := filepath.Join(t.TempDir(), "n0.rec")
	require.NoError(t, WriteRecords(p, recs))
	got, err := ReadRecords(p)
	require.NoError(t, err)
	require.Equal(t, recs, got, "the records read back")
	assert.True(t, got[0].Allowed(), "fields lost: %+v", got[0])
	assert.Equal(t, uint32(99999), got[0].KeyID(), "fields lost: %+v", got[0])
	assert.False(t, got[1].Allowed(), "fields lost: %+v", got[1])
	assert.Equal(t, uint8(local.ReasonNoLease), got[1].Reason(), "fields lost: %+v", got[1])
	assert.Equal(t, int32(-1), got[1].Window, "fields lost: %+v", got[1])
}

func TestWindowOf(t *testing.T) {
	const W, t0 = 1000000, 5000000
	for _, c := range []struct {
		now   int64
		reset time.Duration
		want  int32
	}{
		{t0 + 10, 0, 0},
		{t0 + 2*W + 10, 0, 2},
		// Counted in window 3 by a clock 2 ms ahead of the node's: the
		// node's time is still in window 2.
		{t0 + 3*W - 2000, W * time.Microsecond, 3}, // its clock says t0 + 3W: W to go
		// Counted in window 2 by a clock 3 ms behind: the node is in 3.
		{t0 + 3*W + 1000, 2000 * time.Microsecond, 2},
		{t0 + 500, (W - 500) * time.Microsecond, 0},
	} {
		assert.Equal(t, c.want, windowOf(c.now, c.reset, t0, W), "windowOf(%d, %v)", c.now-t0, c.reset)
	}
}

func TestArrivalCurve(t *testing.T) {
	lim := localx.MustLimit(local.Limit{Algorithm: local.GCRA, Quota: 10, Window: time.Second, Burst: 5})
	const W = 1000000
	// Window 1: a burst of 5 at its start, then one every 100 ms: on the
	// curve (excess 0). Window 2: a burst of 8 at once, 3 past the burst.
	var recs []Record
	add := func(at int64) { recs = append(recs, NewRecord(0, uint32(at), 0, true, 0, int32(at/W))) }
	for range 5 {
		add(W)
	}
	for i := 1; i <= 9; i++ {
		add(W + int64(i)*100000)
	}
	for range 8 {
		add(2*W + 950000)
	}
	over := []float64{math.Inf(-1), math.Inf(-1)}
	arrivalCurve(recs, lim, W, 1, 2, over)
	assert.InDelta(t, 0, over[0], 1e-9, "window 1: excess × burst")
	// (t0, t] from just before 1.9 s to 2.95 s: 1 + 8 admitted, rate ×
	// 1.05 s = 10.5: 9 − 5 − 10.5 < 0; from just before 2.95 s: 8 − 5 = 3.
	assert.InDelta(t, 3.0/5, over[1], 1e-9, "window 2: excess × burst")
}

func TestBounds(t *testing.T) {
	for _, c := range []struct {
		mode, work string
		want       float64
	}{
		{ModeCentral, WorkUniform, 0},
		{ModeHybrid, WorkUniform, 0},
		{ModeHybrid, WorkCold, 8 * 63.0 / 10000},
		{ModeLocal, WorkUniform, 7},
		{ModeLocal, WorkSkewed, 2},
		{ModeNaive, WorkUniform, 1},
		{ModeNaive, WorkSkewed, 1},
		{ModeNaive, WorkUnder, -0.1}, // never more than offered
	} {
		r := &Result{Spec: NewSpec(c.mode, AlgoFixed, c.work, 10000, 8, 30), ModeRun: c.mode}
		got, why := Bound(r)
		assert.InDelta(t, c.want, got, 1e-9, "%s/%s: bound (%s)", c.mode, c.work, why)
		assert.NotEmpty(t, why, "%s/%s: the bound's reason", c.mode, c.work)
	}
}

func TestChartSVG(t *testing.T) {
	c := Chart{Title: "t", XLabel: "L", YLabel: "y", LogY: true, Series: []Series{
		{Name: "a", X: []float64{10, 100, 1000}, Y: []float64{1, 0.01, 0.0001}, Invalid: []bool{false, true, false}, Color: "#000"},
	}}
	svg := c.SVG()
	assert.True(t, strings.HasPrefix(svg, "<svg"), "an SVG:\n%s", svg)
	assert.Equal(t, 4, strings.Count(svg, "<circle"), "the SVG's circles:\n%s", svg)
	assert.Contains(t, svg, "1,000", "the x axis's labels")
}

func TestHist(t *testing.T) {
	for _, ns := range []int64{0, 1, 15, 16, 17, 31, 32, 100, 1000, 123456, 250e6, 3e9} {
		i := histIndex(ns)
		require.Less(t, i, histBuckets, "ns %d", ns)
		assert.GreaterOrEqual(t, histUpper(i), ns, "ns %d: bucket %d", ns, i)
		if i > 0 {
			assert.Less(t, histUpper(i-1), ns, "ns %d: bucket %d", ns, i)
		}
		assert.LessOrEqual(t, float64(histUpper(i)), float64(ns)*1.125+1, "ns %d: bucket too wide", ns)
	}
	var s Slices
	for i := range 1000 {
		s.Add(1500000, time.Duration(i+1)*time.Microsecond) // second 1
	}
	s.Add(10, 5*time.Millisecond) // second 0
	s.Trim()
	require.Len(t, s, 2)
	var h Hist
	h.merge(s[1])
	assert.EqualValues(t, 1000, h.Count())
	assert.InDelta(t, 500, h.Quantile(0.5), 500*0.125)
	assert.InDelta(t, 990, h.Quantile(0.99), 990*0.125)
	assert.InDelta(t, 5000, s[0].Quantile(0.99), 5000*0.125)
}

func TestUsersSchedule(t *testing.T) {
	s := NewUsersSpec(ModeHybrid, 20000, 5)
	users := s.Users()
	require.Len(t, users, 20000)
	abusers := 0
	end := float64(s.Duration().Microseconds())
	for k, u := range users {
		if u.Over(s.Limit) {
			abusers++
			assert.Zero(t, k%UsersAbuseEach, "abuser %d", k)
		} else {
			require.GreaterOrEqual(t, u.Rate, UsersMinRate, "user %d", k)
			require.LessOrEqual(t, u.Rate, UsersMaxRate, "user %d", k)
		}
		require.True(t, u.Start >= 0 && u.Start+u.Len <= end, "user %d: session [%v, %v) outside the run", k, u.Start, u.Start+u.Len)
	}
	assert.Equal(t, 200, abusers)
	assert.Equal(t, users, s.Users(), "users differ between calls")

	total := 0
	perKey := map[uint32]int{}
	for n := range s.Nodes {
		sched := s.Schedule(n)
		assert.Equal(t, sched, s.Schedule(n), "node %d: schedules differ", n)
		for i, a := range sched {
			if i > 0 {
				require.GreaterOrEqual(t, a.At, sched[i-1].At, "node %d: out of order at %d", n, i)
			}
			u := users[a.Key]
			require.True(t, float64(a.At) >= u.Start-1 && float64(a.At) < u.Start+u.Len, "arrival outside key %d's session", a.Key)
			perKey[a.Key]++
		}
		total += len(sched)
	}
	want := s.UsersRate() * s.Duration().Seconds()
	assert.InDelta(t, want, float64(total), 0.03*want, "total arrivals")
	// An abuser's session offers about 10 × L.
	assert.InDelta(t, UsersAbuse*float64(s.Limit), float64(perKey[0]), 5*math.Sqrt(UsersAbuse*float64(s.Limit)))
}

func TestUsersOverAdmission(t *testing.T) {
	s := NewUsersSpec(ModeHybrid, 200, 3)
	users := s.Users()
	lim, err := s.LimOf(AlgoFixed)
	require.NoError(t, err)
	W := s.W()
	// An abuser whose session starts in a measured window before the
	// last: 103 admitted in the window after its first, 100 in its first;
	// key 1 (under): 2 requests, one rejected that the replay admits.
	var key uint32
	var first int32
	for k := 0; k < len(users); k += UsersAbuseEach {
		if f := int32(int64(users[k].Start) / W); f >= 1 && f < int32(s.Windows) {
			key, first = uint32(k), f
			break
		}
	}
	require.NotZero(t, first, "no abuser starts in a measured window")
	var all []Record
	var exact []bool
	for i := range 100 {
		all = append(all, NewRecord(0, uint32(int64(first)*W+int64(i)), key, true, 0, first))
		exact = append(exact, true)
	}
	for i := range 103 {
		all = append(all, NewRecord(0, uint32(int64(first+1)*W+int64(i)), key, true, 0, first+1))
		exact = append(exact, i < 100)
	}
	w1 := int64(1) * W
	all = append(all, NewRecord(0, uint32(w1+5), 1, true, 0, 1), NewRecord(0, uint32(w1+6), 1, false, uint8(local.ReasonLimited), 1))
	exact = append(exact, true, true)
	s.Algo = AlgoFixed
	u := analyzeUsers(s, lim, all, exact)
	assert.InDelta(t, 0.03, u.OverLater.Max, 1e-9)
	assert.InDelta(t, 0, u.OverFirst.Max, 1e-9)
	assert.EqualValues(t, 2, u.UnderReqs)
	assert.EqualValues(t, 1, u.UnderFalseRej)
	assert.InDelta(t, 50, u.UnderFalseRejPct, 1e-9)
}

func TestSpliceSection(t *testing.T) {
	doc := "# R\n\n## Main table\n\nx\n\n## Method\n\nm\n"
	once := SpliceSection(doc, "p", "## S\n\none\n")
	assert.Equal(t, "# R\n\n## Main table\n\nx\n\n<!-- section p -->\n## S\n\none\n<!-- /section p -->\n\n## Method\n\nm\n", once)
	twice := SpliceSection(once, "p", "## S\n\ntwo\n")
	assert.Equal(t, strings.Replace(once, "one", "two", 1), twice)
}

// TestNodeCPUAgainstLocal: the api-users table gives each run's node CPU
// per decision and its ratio to Local mode's on the same arrivals, and the
// targets judge the distributed modes by it, not Local itself.
func TestNodeCPUAgainstLocal(t *testing.T) {
	run := func(mode string, cpuSeconds float64) *Result {
		s := NewUsersSpec(mode, 100, 1)
		r := &Result{Spec: s, ModeRun: mode, Valid: true, Decided: 1000, Users: &UsersResult{}}
		r.NodeCPUusPerDecision = perDecision(cpuSeconds, r.Decided, s)
		return r
	}
	hybrid, local := run(ModeHybrid, 0.06), run(ModeLocal, 0.02)
	results := []*Result{hybrid, local}
	assert.InDelta(t, 30, hybrid.NodeCPUusPerDecision, 1e-9, "0.06 s over 1,000 requests of two rules")
	cells := hybrid.usersCells(results)
	assert.Contains(t, cells, "3.00×", "hybrid against local: %v", cells)
	var judged []string
	for _, c := range UsersTargets(results) {
		if strings.HasPrefix(c.Target, "node CPU") {
			judged = append(judged, c.Target)
			assert.False(t, c.Pass, "3× Local's misses %.1f×", TargetNodeCPUvsLocal)
		}
	}
	assert.Equal(t, []string{"node CPU ≤ 1.5× Local mode's on the same arrivals: api-users, hybrid, fixed"}, judged)
	assert.True(t, math.IsNaN(perDecision(1, 0, hybrid.Spec)), "no decision, no figure")
}

// TestUsersClusterRows: the api-users table puts each mode's Cluster row
// after its one-server row, labelled, and measures a Cluster row's Redis
// CPU against central (cluster)'s and its node CPU against the one Local
// row.
func TestUsersClusterRows(t *testing.T) {
	run := func(s Spec, redisUs, nodeUs float64) *Result {
		return &Result{Spec: s, ModeRun: s.Mode, Valid: true, Decided: 1000, Users: &UsersResult{},
			RedisCPUusPerDecision: redisUs, NodeCPUusPerDecision: nodeUs}
	}
	central := run(NewUsersSpec(ModeCentral, 100, 1), 20, 30)
	hybrid := run(NewUsersSpec(ModeHybrid, 100, 1), 10, 15)
	local := run(NewUsersSpec(ModeLocal, 100, 1), 0, 10)
	clCentral := run(NewUsersClusterSpec(ModeCentral, 100, 1), 40, 36)
	clHybrid := run(NewUsersClusterSpec(ModeHybrid, 100, 1), 10, 20)
	require.NotEqual(t, hybrid.Spec.ID, clHybrid.Spec.ID, "a Cluster run's id (its keys, its files)")
	results := []*Result{clHybrid, local, clCentral, hybrid, central}

	var order []string
	for _, r := range setOf(results, SetUsers) {
		order = append(order, r.ran())
	}
	assert.Equal(t, []string{"central", "central (cluster)", "hybrid", "hybrid (cluster)", "local"}, order)

	cells := clHybrid.usersCells(results)
	assert.Equal(t, "hybrid (cluster)", cells[0])
	assert.Contains(t, cells, "0.25×", "Redis CPU against central (cluster)'s 40 µs, not central's 20: %v", cells)
	assert.Contains(t, cells, "2.00×", "node CPU against Local's: %v", cells)
	assert.Contains(t, hybrid.usersCells(results), "0.50×", "the one-server row against central's")

	var redis []string
	for _, c := range UsersTargets(results) {
		if strings.HasPrefix(c.Target, "Redis CPU") {
			redis = append(redis, c.Target+": "+c.Measured)
		}
	}
	assert.Equal(t, []string{
		"Redis CPU ≤ 0.5× central's: api-users, hybrid, fixed: 10.00 vs 20.00 µs/decision: 0.50×",
		"Redis CPU ≤ 0.5× central's: api-users, hybrid (cluster), fixed: 10.00 vs 40.00 µs/decision: 0.25×",
	}, redis)
	assert.Contains(t, usersText(results), "Rows marked (cluster)")
	assert.NotContains(t, usersText([]*Result{central, hybrid}), "Rows marked (cluster)")
}
