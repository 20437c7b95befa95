package hybrid_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/netproxy"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// regions is a test's regions: each a redis-server and nodes, and a global
// redis-server each reaches through a link that adds latency.
type regions struct {
	global *redistest.Server
	links  []*netproxy.Proxy
	nodes  [][]*hybrid.Limiter
	rules  [][]*hybrid.Rule
}

// startRegions starts n regions of k nodes under one global rule of limit
// lim, their links to the global store delay one way.
func startRegions(t *testing.T, n, k int, lim hybrid.Limit, delay time.Duration) *regions {
	t.Helper()
	rg := &regions{global: redistest.Start(t)}
	prefix := redistest.Prefix(t)
	for i := range n {
		local := redistest.Start(t)
		p, err := netproxy.Start(rg.global.Addr, delay)
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		rg.links = append(rg.links, p)
		var ls []*hybrid.Limiter
		var rs []*hybrid.Rule
		for j := range k {
			l := newNode(t, hybrid.Config{
				Redis: redistest.Client(t, local.Addr), Global: redistest.Client(t, p.Addr()),
				Region: fmt.Sprintf("r%d", i), Keyspace: syncer.Keyspace{Prefix: prefix}, Logger: quiet,
				Sync: hybrid.SyncConfig{NodeID: fmt.Sprintf("r%dn%d", i, j)},
			})
			ls = append(ls, l)
			rs = append(rs, mustRegister(t, l, hybrid.Rule{Name: "g", Limit: lim, Mode: hybrid.Hybrid, Global: true}, hybrid.Hybrid))
		}
		rg.nodes, rg.rules = append(rg.nodes, ls), append(rg.rules, rs)
	}
	return rg
}

// drive sends rate requests per second for key to each node of the regions
// whose weight is not 0 (weight × rate), for d, and returns what each
// region admitted per window of w.
func (rg *regions) drive(t *testing.T, key string, rate float64, weights []float64, w, d time.Duration) []map[int64]int64 {
	out := make([]map[int64]int64, len(rg.nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i, ls := range rg.nodes {
		out[i] = map[int64]int64{}
		if weights[i] == 0 {
			continue
		}
		gap := time.Duration(float64(time.Second) / (rate * weights[i]))
		for j, l := range ls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next := time.Now(); next.Before(end); next = next.Add(gap) {
					time.Sleep(time.Until(next))
					dec, err := l.Allow(context.Background(), rg.rules[i][j], key)
					if err == nil && dec.Allowed() {
						x := time.Now().UnixMicro() / w.Microseconds()
						mu.Lock()
						out[i][x]++
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	return out
}

func TestGlobalRegionsShareOneLimit(t *testing.T) {
	rg := startRegions(t, 3, 2, fixed(300, time.Second), 20*time.Millisecond)
	got := rg.drive(t, "k", 100, []float64{1, 1, 1}, time.Second, 6*time.Second)
	for i := range got {
		t.Logf("region %d: %v", i, got[i])
	}
	_ = assert.True
	_ = redis.Nil
}
