package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

// buildDemo builds the demo without the race detector (the nodes' decision
// latencies are part of what it shows) and returns the binary's path. It
// skips when redis-server is missing, unless CI is set.
func buildDemo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		require.Empty(t, os.Getenv("CI"), "redis-server is not on PATH, and CI is set: make test installs it")
		t.Skip("redis-server is not on PATH: run make test, which installs it")
	}
	goBin, err := exec.LookPath("go") // go test puts GOROOT/bin first on PATH
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "cluster")
	out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

var pidRE = regexp.MustCompile(`pid (\d+)`)

// assertAllGone checks that no process the demo printed the PID of is alive.
func assertAllGone(t *testing.T, out string) {
	t.Helper()
	ms := pidRE.FindAllStringSubmatch(out, -1)
	// redis-server twice (started, then started again) and four nodes, at
	// least when the run got that far.
	require.NotEmpty(t, ms, "the demo printed no PIDs:\n%s", out)
	for _, m := range ms {
		pid, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		err = syscall.Kill(pid, 0)
		assert.True(t, errors.Is(err, syscall.ESRCH), "process %d is still there after the demo ended (kill 0: %v)", pid, err)
	}
}

// TestDemo runs the demo in a short mode and checks its outcome: exit 0, the
// switch to the failure policy and back, no request failed because of
// Redis, the plot written, and no process left behind.
func TestDemo(t *testing.T) {
	bin := buildDemo(t)
	dir := t.TempDir()
	var out bytes.Buffer
	cmd := exec.Command(bin, "-duration", "9s", "-out", dir, "-install=false")
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("the demo took %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := os.ReadFile(filepath.Join(dir, "node1.log"))
			t.Logf("node1.log:\n%s", logs)
		}
	})
	require.NoError(t, err)
	s := out.String()

	assert.Contains(t, s, "requests failed because of Redis: 0 ")
	// Redis is killed at t=3s and started again at t=6s: windows 3-4s to
	// 5-6s are the outage.
	assert.Regexp(t, `(?m)^t=[3-5]-[4-6]s +outage .*`+regexp.QuoteMeta(fallbackName), s, "no node decided by the failure policy during the outage")
	assert.Regexp(t, `(?m)^t=[6-8]-[7-9]s +after .*redis \(hybrid\)`, s, "no node back on Redis after the restart")
	assert.Regexp(t, `(?m)^t=0-1s +before .* abuser \d+ exact \d+`, s, "the first window's row has no exact replay")
	for _, phase := range phaseNames {
		assert.Contains(t, s, phase)
	}
	assert.Regexp(t, `(?m)^abuser: admitted ÷ exact replay +\d\.\d\d +\d\.\d\d +\d\.\d\d$`, s)
	for i := 1; i <= 4; i++ {
		recs, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("decisions-n%d.txt", i)))
		require.NoError(t, err)
		assert.NotEmpty(t, recs, "node n%d recorded no decision", i)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "timeline.svg"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(svg), "<svg "), "timeline.svg is not an SVG")
	assert.Equal(t, 3, strings.Count(string(svg), "<polyline"), "three panels, each with its limit")
	assert.Equal(t, 3, strings.Count(string(svg), "<path"), "three panels, each with the exact replay's caps")
	assertAllGone(t, s)
}

// TestDemoInterrupted sends SIGINT to the demo during the outage and checks
// that it stops every process it started and exits 130.
func TestDemoInterrupted(t *testing.T) {
	bin := buildDemo(t)
	var out strings.Builder // written by the reader below, read once it is done
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(bin, "-duration", "30s", "-out", t.TempDir(), "-install=false")
	cmd.Stdout, cmd.Stderr = pw, pw
	require.NoError(t, cmd.Start())
	pw.Close()
	outage, read := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		killed, seen := false, false
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			killed = killed || strings.HasPrefix(sc.Text(), "t=10s: redis-server")
			// The outage's first window drawn: the policy has decided a
			// window's requests.
			if killed && !seen && strings.HasPrefix(sc.Text(), "t=10-11s") {
				seen = true
				close(outage)
			}
		}
	}()
	select {
	case <-outage:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		<-read
		require.FailNow(t, "Redis was not killed at t=10s, or the outage's first window not drawn", "output:\n%s", out.String())
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		<-read
		require.FailNow(t, "the demo did not stop within 20s of SIGINT", "output:\n%s", out.String())
	}
	<-read
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "output:\n%s", out.String())
	assert.Equal(t, 130, exit.ExitCode())
	assertAllGone(t, out.String())
}

// sec is a time in µs on Redis's clock, s seconds after t0.
func sec(s float64) int64 { return t0 + int64(s*1e6) }

// t0 is a window's start on Redis's clock (a multiple of a second), as the
// driver picks one.
const t0 = 1_700_000_000_000_000

func fixedLimit(t *testing.T, algo string, limit int64) local.Limit {
	t.Helper()
	lim, err := demoLimit(algo, limit)
	require.NoError(t, err)
	return lim
}

func TestFirstWindow(t *testing.T) {
	const w = 1_000_000
	for _, tc := range []struct {
		name            string
		now, lead, want int64
	}{
		{"on a boundary, no lead", t0, 0, t0},
		{"on a boundary, a lead", t0, 500_000, t0 + w},
		{"mid-window", t0 + 123_456, 0, t0 + w},
		{"the lead crosses a boundary", t0 + 600_000, 500_000, t0 + 2*w},
		{"the lead ends on a boundary", t0 + 500_000, 500_000, t0 + w},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := firstWindow(tc.now, w, tc.lead)
			assert.Equal(t, tc.want, got)
			assert.Zero(t, got%w, "not a multiple of the window on Redis's clock")
		})
	}
}

func TestWindowOf(t *testing.T) {
	const w = 1_000_000
	for _, tc := range []struct {
		at   int64
		want int
	}{
		{t0, 0}, {t0 + w - 1, 0}, {t0 + w, 1}, {t0 + 29*w + 5, 29},
		{t0 - 1, -1}, {t0 - w, -1}, {t0 - w - 1, -2},
	} {
		assert.Equal(t, tc.want, windowOf(tc.at, t0, w), "at t0%+d", tc.at-t0)
	}
}

func TestOffsetOf(t *testing.T) {
	_, _, ok := offsetOf(nil)
	require.False(t, ok)
	off, rtt, ok := offsetOf([]timeSample{
		{sent: 1000, redis: 9000, recv: 1800}, // 800 µs: queued behind other traffic
		{sent: 2000, redis: 10_060, recv: 2100},
		{sent: 3000, redis: 11_500, recv: 3400},
	})
	require.True(t, ok)
	assert.Equal(t, int64(100), rtt, "the shortest round trip")
	assert.Equal(t, int64(10_060-2050), off, "Redis's reading taken at the round trip's middle")
}

func TestParseRecords(t *testing.T) {
	var b []byte
	b = appendRecord(b, sec(0.25), "abuser", outcomeAdmitted)
	b = appendRecord(b, sec(0.5), "new-03", outcomeRefused)
	b = appendRecord(b, sec(0.75), "steady-01", outcomeFailed)
	cut := len(b) - 4 // the last line still being written

	recs, rest, err := parseRecords(b[:cut], 2)
	require.NoError(t, err)
	assert.Equal(t, []record{
		{at: sec(0.25), key: "abuser", node: 2, outcome: outcomeAdmitted},
		{at: sec(0.5), key: "new-03", node: 2, outcome: outcomeRefused},
	}, recs)
	recs, rest, err = parseRecords(append(rest, b[cut:]...), 2)
	require.NoError(t, err)
	assert.Empty(t, rest)
	assert.Equal(t, []record{{at: sec(0.75), key: "steady-01", node: 2, outcome: outcomeFailed}}, recs)

	for _, bad := range []string{"12 abuser\n", "x abuser a\n", "12 abuser z\n", "12  a\n"} {
		_, _, err := parseRecords([]byte(bad), 0)
		assert.Error(t, err, "%q", bad)
	}
}

// requests returns n admitted requests of key on node, spaced by 1 ms from
// at seconds.
func requests(key string, node int, at float64, n int, outcome byte) []record {
	out := make([]record, n)
	for i := range out {
		out[i] = record{at: sec(at) + int64(i)*1000, key: key, node: node, outcome: outcome}
	}
	return out
}

// TestReplayBoundaryBurst holds the fixed window's boundary burst: twice the
// limit within 200 ms across a boundary is what an exact limiter admits too,
// and counted per window it is the limit in each.
func TestReplayBoundaryBurst(t *testing.T) {
	recs := slices.Concat(
		requests("abuser", 0, 0.9, 4, outcomeAdmitted),
		requests("abuser", 1, 0.95, 1, outcomeRefused),
		requests("abuser", 2, 1.05, 4, outcomeAdmitted),
		requests("abuser", 3, 1.1, 2, outcomeRefused),
	)
	require.NoError(t, replay(fixedLimit(t, "fixed_window", 4), recs))

	var inSecond int64 // admitted in the second from 0.5 s to 1.5 s, across the boundary
	for _, r := range recs {
		if r.exact && r.at >= sec(0.5) && r.at < sec(1.5) {
			inSecond++
		}
	}
	assert.Equal(t, int64(8), inSecond, "the exact replay admits the boundary burst: twice the limit in a second")

	ws := tally(recs, t0, 1_000_000, 2)
	for i, w := range ws {
		assert.Equal(t, int64(4), w.admitted[classAbuser], "window %d: the cluster", i)
		assert.Equal(t, int64(4), w.exact[classAbuser], "window %d: the exact replay", i)
		assert.Zero(t, w.over[classAbuser]+w.under[classAbuser], "window %d", i)
	}
	assert.Equal(t, int64(1), ws[0].refused[classAbuser])
	assert.Equal(t, int64(2), ws[1].refused[classAbuser])
}

// TestReplayFollowsTheAlgorithm: the replay is the rule's algorithm; the
// sliding window counter weighs the previous window in and refuses the
// burst the fixed window admits.
func TestReplayFollowsTheAlgorithm(t *testing.T) {
	recs := slices.Concat(requests("abuser", 0, 0.9, 4, outcomeAdmitted), requests("abuser", 0, 1.1, 4, outcomeAdmitted))
	require.NoError(t, replay(fixedLimit(t, "sliding_window_counter", 4), recs))
	ws := tally(recs, t0, 1_000_000, 2)
	assert.Equal(t, int64(4), ws[0].exact[classAbuser])
	assert.Zero(t, ws[1].exact[classAbuser], "0.9 of the previous window's 4 weighed in: no room at 1.1 s")
	assert.Equal(t, int64(4), ws[1].over[classAbuser], "what the cluster admitted beyond the exact replay")
}

// TestReplayInTimeOrder: the nodes' records interleave; the replay decides
// them in the order they were decided, whatever the order they are read in.
func TestReplayInTimeOrder(t *testing.T) {
	var recs []record
	for node := 3; node >= 0; node-- { // node 3's file read first
		for i := range 3 {
			at := 0.1 + float64(i*4+node)*0.01 // n0 at 0.10, n1 at 0.11, …
			recs = append(recs, record{at: sec(at), key: "skewed", node: node, outcome: outcomeAdmitted})
		}
	}
	require.NoError(t, replay(fixedLimit(t, "fixed_window", 5), recs))
	require.True(t, slices.IsSortedFunc(recs, func(a, b record) int { return int(a.at - b.at) }))
	for i, r := range recs {
		assert.Equal(t, i < 5, r.exact, "request %d at %dµs", i, r.at-t0)
	}
}

// TestCountWindowClients: several clients of a class in one window count
// against the limit times the clients, and what one client got beyond the
// replay is not cancelled by what another got short of it.
func TestCountWindowClients(t *testing.T) {
	recs := slices.Concat(
		requests("new-01", 0, 0.1, 5, outcomeAdmitted), // one more than the replay
		requests("new-02", 1, 0.2, 3, outcomeAdmitted),
		requests("new-02", 1, 0.3, 3, outcomeRefused), // one the replay admits
		requests("steady-01", 2, 0.4, 2, outcomeAdmitted),
		requests("someone", 3, 0.5, 2, outcomeAdmitted), // not the load generator's
	)
	require.NoError(t, replay(fixedLimit(t, "fixed_window", 4), recs))
	w := tally(recs, t0, 1_000_000, 1)[0]
	assert.Equal(t, int64(2), w.clients[classNew])
	assert.Equal(t, int64(8), w.admitted[classNew])
	assert.Equal(t, int64(8), w.exact[classNew])
	assert.Equal(t, int64(3), w.refused[classNew])
	assert.Equal(t, int64(5), w.most[classNew])
	assert.Equal(t, int64(1), w.over[classNew])
	assert.Equal(t, int64(1), w.under[classNew])
	assert.Equal(t, int64(5), w.nodeAdmitted[classNew][0])
	assert.Equal(t, int64(3), w.nodeRefused[1])
	assert.Equal(t, int64(2), w.exact[classSteady])
	assert.Equal(t, int64(15), w.decisions, "every request recorded, the unknown client's included")
}

// TestTallyAligned: windows are counted from the start the driver picked on
// Redis's clock; records before the first window and after the last are
// left out.
func TestTallyAligned(t *testing.T) {
	recs := slices.Concat(
		requests("abuser", 0, -0.5, 2, outcomeAdmitted),
		requests("abuser", 0, 0.999, 1, outcomeAdmitted),
		requests("abuser", 0, 1.0, 3, outcomeAdmitted),
		requests("abuser", 0, 2.0, 7, outcomeAdmitted),
	)
	require.NoError(t, replay(fixedLimit(t, "fixed_window", 10), recs))
	ws := tally(recs, t0, 1_000_000, 2)
	require.Len(t, ws, 2)
	assert.Equal(t, int64(1), ws[0].admitted[classAbuser])
	assert.Equal(t, int64(3), ws[1].admitted[classAbuser])
}

// TestLiveWindows runs the table's path: nodes write records, the driver
// reads them as they come and decides them window by window; a record read
// after its window was drawn is decided but not counted there, and the
// final pass counts it.
func TestLiveWindows(t *testing.T) {
	dir := t.TempDir()
	lim := fixedLimit(t, "fixed_window", 2)
	var logs []*recordLog
	var tails []*recordTail
	for n := range 2 {
		path := filepath.Join(dir, fmt.Sprintf("decisions-n%d.txt", n+1))
		l, err := newRecordLog(path, 0)
		require.NoError(t, err)
		logs = append(logs, l)
		tl, err := openRecordTail(path, n)
		require.NoError(t, err)
		tails = append(tails, tl)
		t.Cleanup(func() { l.close(); tl.close() })
	}
	add := func(node int, at float64, outcome byte) {
		logs[node].add(time.UnixMicro(sec(at)), "abuser", outcome)
	}
	live, err := newLiveWindows(lim, tails, t0)
	require.NoError(t, err)
	defer live.close()

	add(0, 0.1, outcomeAdmitted)
	add(1, 0.2, outcomeAdmitted)
	add(0, 0.3, outcomeRefused)
	require.NoError(t, logs[0].flush())
	add(1, 1.05, outcomeAdmitted) // the next window's, already written
	require.NoError(t, logs[1].flush())
	add(0, 0.9, outcomeAdmitted) // not written out before window 0 is drawn
	w0, err := live.window(0)
	require.NoError(t, err)
	assert.Equal(t, int64(3), w0.decisions)
	assert.Equal(t, int64(2), w0.admitted[classAbuser])
	assert.Equal(t, int64(2), w0.exact[classAbuser])

	require.NoError(t, logs[0].flush())
	w1, err := live.window(1)
	require.NoError(t, err)
	assert.Equal(t, int64(1), w1.decisions, "window 0's late record is not window 1's")
	assert.Equal(t, int64(1), w1.admitted[classAbuser])
	assert.Equal(t, int64(1), w1.exact[classAbuser])

	all, err := live.all()
	require.NoError(t, err)
	require.Len(t, all, 5)
	require.NoError(t, replay(lim, all))
	ws := tally(all, t0, 1_000_000, 2)
	assert.Equal(t, int64(3), ws[0].admitted[classAbuser])
	assert.Equal(t, int64(2), ws[0].exact[classAbuser])
	assert.Equal(t, int64(1), ws[0].over[classAbuser])
}

// TestSummaryPerWindow: the summary's figures are per window: the cluster
// against the exact replay, and the most a client got in one window against
// the limit.
func TestSummaryPerWindow(t *testing.T) {
	var s summary
	s.limit = 400
	for i, adm := range []int64{400, 400, 430, 380, 400} {
		var w windowCounts
		w.clients[classAbuser], w.admitted[classAbuser], w.exact[classAbuser], w.most[classAbuser] = 1, adm, 400, adm
		w.over[classAbuser], w.under[classAbuser] = max(0, adm-400), max(0, 400-adm)
		s.add(row{t: i, phase: phaseOf(i, 2, 4), win: w})
	}
	var out strings.Builder
	s.write(&out)
	t.Log("\n" + out.String())
	assert.Regexp(t, `(?m)^windows +2 +2 +1$`, out.String())
	assert.Regexp(t, `(?m)^abuser: admitted ÷ exact replay +1\.00 +1\.01 +1\.00$`, out.String())
	assert.Regexp(t, `(?m)^abuser: most for a client in a window ÷ limit +1\.00 +1\.07 +1\.00$`, out.String())
	assert.Regexp(t, `(?m)^admitted beyond the exact replay +0 +30 +0$`, out.String())
	assert.Regexp(t, `(?m)^admitted short of the exact replay +0 +20 +0$`, out.String())
	assert.Regexp(t, `(?m)^new: admitted ÷ exact replay +- +- +-$`, out.String(), "no new client: no ratio")
}

// textWidth estimates the width of s in a sans-serif font of size px: 0.6
// of the size a character, a little over DejaVu Sans's average.
func textWidth(s string, size float64) float64 {
	return 0.6 * size * float64(utf8.RuneCountInString(s))
}

// TestTimelineFits: the plot's title lines fit its width, at the longest
// figures the flags allow; and each panel has its bars, caps and limit.
func TestTimelineFits(t *testing.T) {
	o := driverOptions{nodes: maxNodes, limit: 2000, algo: "sliding_window_counter", duration: time.Minute}
	for i, line := range timelineTitle(o, 20, 40) {
		size := float64(svgFontSize)
		if i == 0 {
			size = svgTitleSize
		}
		assert.LessOrEqual(t, 16+textWidth(line, size), float64(svgW-8), "title line %d: %q", i+1, line)
	}
	s := &summary{limit: 400, wl: defaultWorkload(400)}
	for i := range 9 {
		var w windowCounts
		for cl := range numClasses {
			w.clients[cl], w.exact[cl] = 1, 400
			w.nodeAdmitted[cl][0], w.nodeAdmitted[cl][1] = 300, 100
		}
		s.add(row{t: i, phase: phaseOf(i, 3, 6), win: w})
	}
	svg := timelineSVG(s, driverOptions{nodes: 2, limit: 400, algo: "fixed_window"}, 3, 6)
	assert.Equal(t, 3, strings.Count(svg, "<polyline"))
	assert.Equal(t, 3, strings.Count(svg, "<path"))
	assert.Equal(t, 3*9*2, strings.Count(svg, `<rect x=`)-3*(1+1+2), "a bar segment per window, node and panel (beside the shade, frame and legend)")
	assert.Contains(t, svg, "admitted per window")
}
