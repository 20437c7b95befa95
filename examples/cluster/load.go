package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The kinds of client the load generator runs.
const (
	classAbuser = iota // one client far over its limit, spread evenly over the nodes
	classSkewed        // one client over its limit, most of its requests on one node
	classNew           // clients arriving one after another, each over its limit for a while
	classSteady        // clients under their limit, spread evenly: they should see no 429
	numClasses
)

var classNames = [numClasses]string{"abuser", "skewed", "new", "steady"}

// maxNodes bounds -nodes: the counters are arrays.
const maxNodes = 8

// workload is the demo's traffic, in requests per second per client.
type workload struct {
	abuserRate, skewedRate, newRate, steadyRate float64
	skewShare                                   float64       // of the skewed client's requests on node 1
	steadyClients                               int           // how many steady clients
	newEvery, newLife                           time.Duration // a new client arrives every newEvery and stays newLife
}

// defaultWorkload scales the traffic to the limit: the abuser asks 3 times
// it, the skewed client 2 times, each new one 1.5 times, the steady clients
// a quarter of it.
func defaultWorkload(limit int64) workload {
	l := float64(limit)
	return workload{
		abuserRate: 3 * l, skewedRate: 2 * l, newRate: 1.5 * l, steadyRate: 0.25 * l,
		skewShare: 0.8, steadyClients: 4,
		newEvery: 2 * time.Second, newLife: 3 * time.Second,
	}
}

// counts are what the load generator saw, per class of client. What the
// nodes decided they record themselves (recordLog), with the time.
type counts struct {
	failed  [numClasses]atomic.Int64 // answered 5xx or not at all
	sent    [numClasses]atomic.Int64
	dropped atomic.Int64 // arrivals not sent: every worker was busy
}

// client is one client key and its traffic.
type client struct {
	key        string
	class      int
	rate       float64
	start, end time.Duration // active from start to end after the load began
	due        float64       // requests due and not sent yet
	seq        uint64
}

// job is one request to send.
type job struct {
	class, node int
	key         string
}

// loadGen sends the workload to the nodes, open loop: arrivals are due at
// their rate whatever the replies, and dropped (counted) when every worker
// is busy.
type loadGen struct {
	w       workload
	addrs   []string
	c       *counts
	http    *http.Client
	jobs    chan job
	stopped atomic.Bool
	wg      sync.WaitGroup
}

const (
	loadWorkers = 96
	loadQueue   = 4096 // arrivals waiting for a worker; more are dropped
	loadTick    = 5 * time.Millisecond
)

func newLoadGen(w workload, addrs []string, c *counts) *loadGen {
	tr := &http.Transport{MaxIdleConns: 2 * loadWorkers, MaxIdleConnsPerHost: loadWorkers, IdleConnTimeout: time.Minute}
	return &loadGen{
		w: w, addrs: addrs, c: c,
		http: &http.Client{Transport: tr, Timeout: 10 * time.Second}, // long: a request the machine is slow to answer is late, not failed
		jobs: make(chan job, loadQueue),
	}
}

// run sends requests from begin (a window's start: clients' arrivals are
// times since it) until ctx ends, then waits for the requests in flight.
func (g *loadGen) run(ctx context.Context, begin time.Time) {
	for range loadWorkers {
		g.wg.Add(1)
		go g.worker()
	}
	clients := []*client{
		{key: "abuser", class: classAbuser, rate: g.w.abuserRate},
		{key: "skewed", class: classSkewed, rate: g.w.skewedRate},
	}
	for i := range g.w.steadyClients {
		clients = append(clients, &client{key: fmt.Sprintf("steady-%02d", i+1), class: classSteady, rate: g.w.steadyRate})
	}
	nextNew, newSeq := time.Duration(0), 0
	stop := func() {
		g.stopped.Store(true)
		close(g.jobs)
		g.wg.Wait()
		g.http.CloseIdleConnections()
	}
	select {
	case <-ctx.Done():
		stop()
		return
	case <-time.After(time.Until(begin)):
	}
	last := begin
	t := time.NewTicker(loadTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			stop()
			return
		case now := <-t.C:
			el, dt := now.Sub(begin), now.Sub(last).Seconds()
			last = now
			for el >= nextNew {
				newSeq++
				clients = append(clients, &client{
					key: fmt.Sprintf("new-%02d", newSeq), class: classNew, rate: g.w.newRate,
					start: nextNew, end: nextNew + g.w.newLife,
				})
				nextNew += g.w.newEvery
			}
			kept := clients[:0]
			for _, cl := range clients {
				if cl.end != 0 && el >= cl.end {
					continue // gone
				}
				kept = append(kept, cl)
				cl.due += cl.rate * dt
				for ; cl.due >= 1; cl.due-- {
					g.send(cl)
				}
			}
			clients = kept
		}
	}
}

// send queues one request of cl to the node its class picks.
func (g *loadGen) send(cl *client) {
	n := len(g.addrs)
	var node int
	switch cl.class {
	case classSkewed:
		if rand.Float64() < g.w.skewShare {
			node = 0
		} else {
			node = 1 + int(cl.seq%uint64(n-1))
		}
	case classNew:
		node = rand.IntN(n)
	default:
		node = int(cl.seq % uint64(n))
	}
	cl.seq++
	g.c.sent[cl.class].Add(1)
	select {
	case g.jobs <- job{class: cl.class, node: node, key: cl.key}:
	default:
		g.c.dropped.Add(1)
	}
}

func (g *loadGen) worker() {
	defer g.wg.Done()
	for j := range g.jobs {
		if g.stopped.Load() {
			continue // the run is over: what is queued is not sent
		}
		g.do(j)
	}
}

func (g *loadGen) do(j job) {
	req, err := http.NewRequest(http.MethodGet, "http://"+g.addrs[j.node]+"/api", nil)
	if err != nil {
		g.c.failed[j.class].Add(1)
		return
	}
	req.Header.Set(clientHeader, j.key)
	resp, err := g.http.Do(req)
	if err != nil {
		g.c.failed[j.class].Add(1)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		g.c.failed[j.class].Add(1)
	}
}
