package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRegions runs the command as make bench-regions does, with C alone,
// four of its scenarios and short runs: 3 regions of 3 node processes, a
// redis-server per region and a global one, links of 40 ms each way (the
// first region's none), L = 1,000 per second, 2 × L offered. It checks the bounds the design holds,
// not the benchmark's targets: no window past L beyond the fault's, the
// limit shared as traffic moves, a region cut off holding its share.
func TestRegions(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server is not on PATH, and CI is set: make test installs it")
		}
		t.Skip("redis-server is not on PATH: make test installs it")
	}
	if testing.Short() {
		t.Skip("about a minute of processes")
	}
	dir := t.TempDir()
	exe := filepath.Join(dir, "regions")
	build := exec.Command("go", "build", "-o", exe, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	js := filepath.Join(dir, "out.json")
	// A region alone is TestGlobalRegionAloneGetsTheLimit's, in package
	// hybrid: the others need processes.
	run := exec.Command(exe, "-modes", modeGlobal, "-scenario", "uniform,shift,cut,kill", "-windows", "6", "-warm", "2s",
		"-json", js, "-dir", filepath.Join(dir, "redis"))
	out, err = run.CombinedOutput()
	require.NoError(t, err, "regions: %s", out)
	t.Logf("%s", out)
	b, err := os.ReadFile(js)
	require.NoError(t, err)
	var got []modeWindows
	require.NoError(t, json.Unmarshal(b, &got))
	require.Len(t, got, 4, "a row per scenario")
	for _, m := range got {
		L := float64(m.Limit)
		var sum, fault float64
		for w, per := range m.Admitted {
			a := float64(total(per))
			sum += a
			if w >= m.FaultFrom && w < m.FaultTo && m.FaultTo > 0 {
				fault += a
				assert.LessOrEqual(t, a, 1.05*L, "%s: fault window %d: admitted", m.Scenario, w)
				continue
			}
			assert.LessOrEqual(t, a, 1.02*L, "%s: window %d: admitted", m.Scenario, w)
		}
		mean := sum / float64(len(m.Admitted)) / L
		switch m.Scenario {
		case "uniform":
			assert.GreaterOrEqual(t, mean, 0.95, "%s: mean admitted ÷ L", m.Scenario)
		case "shift":
			assert.GreaterOrEqual(t, mean, 0.9, "%s: mean admitted ÷ L", m.Scenario)
		case "cut":
			// the region cut off keeps its share: a third of the limit
			var cut int64
			for w := m.FaultFrom; w < m.FaultTo; w++ {
				cut += m.Admitted[w][len(m.Admitted[w])-1]
			}
			assert.Greater(t, float64(cut)/float64(m.FaultTo-m.FaultFrom), 0.25*L, "cut: the region cut off, per fault window")
		case "kill":
			assert.GreaterOrEqual(t, fault/float64(m.FaultTo-m.FaultFrom), 0.8*L, "kill: the regions keep their shares while the store is down")
		}
	}
}
