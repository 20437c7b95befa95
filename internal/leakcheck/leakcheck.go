// Package leakcheck fails a test that leaves goroutines of this module
// running after it ends.
package leakcheck

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// Check registers a cleanup, run after the test's other cleanups, that fails
// t if goroutines started by this module's packages are still running. It
// gives exiting goroutines up to two seconds to finish.
func Check(t testing.TB) {
	t.Helper()
	before := leaked()
	t.Cleanup(func() {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for {
			now := leaked()
			extra := 0
			for site, n := range count(now) {
				extra += max(n-count(before)[site], 0)
			}
			if extra == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("leakcheck: %d goroutine(s) still running:\n%s", extra, strings.Join(now, "\n\n"))
				return
			}
			runtime.Gosched()
			time.Sleep(time.Millisecond)
		}
	})
}

func count(sites []string) map[string]int {
	m := map[string]int{}
	for _, s := range sites {
		m[s]++
	}
	return m
}

// leaked returns the creation sites of goroutines running code of this
// module, other than tests.
func leaked() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "github.com/hybridlimit/hybridlimit/") {
			continue
		}
		if strings.Contains(g, "testing.tRunner") || strings.Contains(g, "leakcheck.leaked") {
			continue
		}
		out = append(out, site(g))
	}
	return out
}

// site reduces a goroutine's stack to its function and creator, which stay
// the same while it runs, so goroutines present before a test can be told
// from new ones.
func site(g string) string {
	lines := strings.Split(g, "\n")
	var fn, creator string
	if len(lines) > 1 {
		fn = lines[1]
	}
	for i, l := range lines {
		if strings.HasPrefix(l, "created by ") && i+1 < len(lines) {
			creator = l + " " + strings.TrimSpace(lines[i+1])
		}
	}
	return fn + " | " + creator
}
