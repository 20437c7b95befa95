package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildDemo builds the demo without the race detector (the nodes' decision
// latencies are part of what it shows) and returns the binary's path. It
// skips when redis-server is missing, unless CI is set.
func buildDemo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server is not on PATH, and CI is set: make test installs it")
		}
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
	// Redis is killed at t=3s and started again at t=6s.
	assert.Regexp(t, `(?m)^t= *[4-6]s outage .*`+regexp.QuoteMeta(fallbackName), s, "no node decided by the failure policy during the outage")
	assert.Regexp(t, `(?m)^t= *[7-9]s after .*redis \(hybrid\)`, s, "no node back on Redis after the restart")
	for _, phase := range phaseNames {
		assert.Contains(t, s, phase)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "timeline.svg"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(svg), "<svg "), "timeline.svg is not an SVG")
	assert.Equal(t, 3*(4+2), strings.Count(string(svg), "<polyline"), "three panels of four nodes, the total and the limit")
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
		seen := false
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if !seen && strings.HasPrefix(sc.Text(), "t=10s: redis-server") {
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
		t.Fatalf("Redis was not killed at t=10s:\n%s", out.String())
	}
	time.Sleep(1500 * time.Millisecond) // into the outage: leases expiring, the policy deciding
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		<-read
		t.Fatalf("the demo did not stop within 20s of SIGINT:\n%s", out.String())
	}
	<-read
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "output:\n%s", out.String())
	assert.Equal(t, 130, exit.ExitCode())
	assertAllGone(t, out.String())
}
