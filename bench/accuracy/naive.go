package accuracy

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// naive is the peer design the hybrid mode is measured against: decide
// locally, push deltas every interval, gubernator GLOBAL's behaviour, kept
// as simple and as fair as we could make it.
//
// Fixed window: a node keeps, per key, the window it is in, the window's
// global total as Redis last returned it (0 for a window it has not synced
// yet), and what it admitted there since. It admits iff
// global + own since + 1 ≤ L. Every interval, for every key it decided
// since the last sync (or that has admissions to push), one script
// (INCRBY of the unpushed delta into a per-window counter, PEXPIRE 2W)
// returns the window's new total, which becomes global. A delta admitted in
// window w and pushed after its end still goes into w's counter (fairer than
// gubernator, whose late batches drain the next window).
//
// GCRA: a node keeps a local TAT. It admits like GCRA on it. Every interval
// it pushes its admissions since the last push; Redis advances the shared
// TAT by that count × the emission interval from max(TAT, now) and returns
// it; the node's TAT becomes the returned one plus what it admitted while
// the reply was in flight.
//
// Times are µs since T0 (the GCRA's in units of 1/L µs, so the emission
// interval is W exactly). One script per active key per sync: the same
// accounting as the hybrid's lease scripts.
type naive struct {
	fixed    bool
	w, limit int64
	burst    int64                 // GCRA
	client   redis.UniversalClient // one server, or a Cluster
	prefix   string
	interval time.Duration
	t0       int64
	rounds   *rounds

	mu    sync.Mutex
	keys  map[uint32]*nkey
	dirty []uint32 // keys decided since the last sync

	stop chan struct{}
	done chan struct{}
	errs int
}

type nkey struct {
	dirty bool
	// Fixed window.
	wid    int64 // window start, µs since T0
	global int64 // wid's total in Redis at the last sync, own pushes included
	own    int64 // admitted in wid, not pushed yet
	old    []delta
	// GCRA, in units of 1/L µs.
	tat  int64
	gown int64 // admitted since the last push
}

type delta struct{ wid, n int64 }

var naiveScript = redis.NewScript(`
if ARGV[1] == '0' then
  local v = redis.call('INCRBY', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return v
end
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local n = tonumber(ARGV[2])
if n > 0 then
  local now = tonumber(ARGV[4])
  if tat < now then tat = now end
  tat = tat + n * tonumber(ARGV[5])
  redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', ARGV[3])
end
return tat
`)

func newNaive(ctx context.Context, client redis.UniversalClient, lim localx.Limit, prefix string, interval time.Duration, t0 int64, r *rounds) (*naive, error) {
	n := &naive{
		w: lim.Window().Microseconds(), limit: lim.Quota(), client: client, prefix: prefix,
		interval: interval, t0: t0, rounds: r, keys: map[uint32]*nkey{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	switch lim.Algorithm() {
	case local.FixedWindow:
		n.fixed = true
	case local.GCRA:
		n.burst = lim.Burst()
	default:
		return nil, fmt.Errorf("accuracy: naive mode: %v not built (fixed window and GCRA only)", lim.Algorithm())
	}
	if err := naiveScript.Load(ctx, client).Err(); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *naive) start() { go n.loop() }

func (n *naive) loop() {
	defer close(n.done)
	t := time.NewTicker(n.interval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.sync()
		}
	}
}

// close stops the loop and pushes what is left.
func (n *naive) close() {
	close(n.stop)
	<-n.done
	n.sync()
}

// decide decides one request for key k at now (µs since T0); it returns the
// decision and, for the fixed window, the end of the window it counted in
// (µs since T0).
func (n *naive) decide(k uint32, now int64) (bool, int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.keys[k]
	if s == nil {
		s = &nkey{wid: -1}
		n.keys[k] = s
	}
	if !s.dirty {
		s.dirty = true
		n.dirty = append(n.dirty, k)
	}
	if n.fixed {
		w := now - now%n.w
		if s.wid != w {
			if s.own > 0 {
				s.old = append(s.old, delta{s.wid, s.own})
			}
			s.wid, s.global, s.own = w, 0, 0
		}
		if s.global+s.own+1 > n.limit {
			return false, w + n.w
		}
		s.own++
		return true, w + n.w
	}
	nowS := now * n.limit
	tat := max(s.tat, nowS)
	if tat+n.w-nowS > n.burst*n.w {
		return false, 0
	}
	s.tat = tat + n.w
	s.gown++
	return true, 0
}

type naiveCall struct {
	k       uint32
	current bool  // the key's current window (fixed), or its TAT (GCRA)
	wid     int64 // fixed
	n       int64 // pushed
	cmd     *redis.Cmd
}

func (n *naive) sync() {
	n.mu.Lock()
	nowRel := time.Now().UnixMicro() - n.t0
	var calls []naiveCall
	for _, k := range n.dirty {
		s := n.keys[k]
		s.dirty = false
		if n.fixed {
			for _, d := range s.old {
				calls = append(calls, naiveCall{k: k, wid: d.wid, n: d.n})
			}
			s.old = s.old[:0]
			calls = append(calls, naiveCall{k: k, current: true, wid: s.wid, n: s.own})
			s.own = 0
		} else {
			calls = append(calls, naiveCall{k: k, current: true, n: s.gown})
			s.gown = 0
		}
	}
	n.dirty = n.dirty[:0]
	n.mu.Unlock()
	if len(calls) == 0 {
		n.rounds.round()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.interval)
	defer cancel()
	ttlFixed := strconv.FormatInt(2*n.w/1000, 10)
	ttlGCRA := strconv.FormatInt((n.burst*n.w/n.limit+n.w)/1000, 10) // the burst refills, and a window more
	pipe := n.client.Pipeline()
	for i := range calls {
		c := &calls[i]
		if n.fixed {
			key := n.prefix + ":" + strconv.FormatUint(uint64(c.k), 10) + ":" + strconv.FormatInt(c.wid, 10)
			c.cmd = naiveScript.EvalSha(ctx, pipe, []string{key}, "0", c.n, ttlFixed)
		} else {
			key := n.prefix + ":" + strconv.FormatUint(uint64(c.k), 10)
			c.cmd = naiveScript.EvalSha(ctx, pipe, []string{key}, "1", c.n, ttlGCRA, nowRel*n.limit, n.w)
		}
	}
	pipe.Exec(ctx)
	n.mu.Lock()
	for i := range calls {
		c := &calls[i]
		v, err := c.cmd.Int64()
		if err != nil {
			n.errs++
			// Not pushed: put it back for the next sync.
			s := n.keys[c.k]
			if n.fixed {
				if c.current && s.wid == c.wid {
					s.own += c.n
				} else if c.n > 0 {
					s.old = append(s.old, delta{c.wid, c.n})
				}
			} else {
				s.gown += c.n
			}
			if !s.dirty {
				s.dirty = true
				n.dirty = append(n.dirty, c.k)
			}
			continue
		}
		if !c.current {
			continue
		}
		s := n.keys[c.k]
		if n.fixed {
			if s.wid == c.wid {
				s.global = max(s.global, v)
			}
		} else {
			// The global TAT, plus what this node admitted since the push.
			s.tat = v + s.gown*n.w
		}
	}
	n.mu.Unlock()
	n.rounds.round()
}
