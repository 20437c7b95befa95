package hybrid

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/hashicorp/memberlist"

	// fallback runs the gossip node; its init sets gossiphook.New.
	_ "github.com/hybridlimit/hybridlimit/fallback"
	"github.com/hybridlimit/hybridlimit/internal/gossiphook"
	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/lease"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// GossipConfig configures the gossip node a Limiter runs, for
// Config.Gossip. Every zero field takes the
// default it documents (docs/operating.md#defaults lists them all); the
// zero value, with Keys set, is a LAN node named after the host on port
// 7946 that joins nobody (set Seeds). New copies the GossipConfig; later
// changes to it have no effect.
type GossipConfig struct {
	// Memberlist is the gossip layer's configuration in memberlist's own
	// terms: node name, bind and advertise addresses and ports, probe,
	// gossip and push/pull intervals, packet size (UDPBufferSize, about
	// 1,400 bytes by default). Default: memberlist.DefaultLANConfig(). The
	// node copies it and never changes the caller's value. It must leave
	// Delegate, Keyring, SecretKey, Label, Logger and LogOutput
	// unset: the node sets them from this Config. Events, if set, is called
	// after the node's own membership bookkeeping. A zero DeadNodeReclaimTime
	// becomes 30s, so a node that restarts on a new address takes its name
	// back. Its Name is 1 to 128 bytes.
	Memberlist *memberlist.Config

	// Seeds are the "host:port" addresses of peers to join at start and
	// to join again every RejoinInterval while any of them is not a member
	// (after a partition heals, or when a seed started later). Default:
	// none.
	Seeds []string
	// RejoinInterval is how often the seeds missing from the membership
	// are joined again. Default: 30s.
	RejoinInterval time.Duration

	// Keys is the keyring, used to encrypt and authenticate every packet
	// and stream: the first key is the primary (used to send), every key is
	// tried on receipt, so keys rotate by three rolling restarts: the new
	// key added after the old everywhere, then put first everywhere, then
	// the old one removed.
	// Each key is 16, 24 or 32 bytes (AES-128, -192, -256). Required unless
	// Insecure is set: an open gossip port lets anyone forge counts.
	Keys [][]byte
	// Insecure allows a node without Keys, for tests on a trusted
	// loopback only. Default: false.
	Insecure bool
	// Label is the cluster label: a node only speaks with nodes of the
	// same label, so two clusters sharing a network (or a key) stay apart.
	// Default: "hybridlimit"; at most 255 bytes.
	Label string

	// Interval is how often this node queues records for its busy keys and
	// rebuilds the snapshot its estimates come from. Default: 200ms.
	Interval time.Duration
	// DemandHalfLife is the half-life of the moving average of a key's
	// demand. Shorter follows shifts in traffic faster and noise more.
	// Default: 2s.
	DemandHalfLife time.Duration
	// Reserve is the part of each key's remaining budget split evenly
	// among members rather than by demand, so a member whose demand has not
	// reached this node yet still has a little. In (0, 0.5]. Default: 0.05.
	Reserve float64
	// RecordTTL is how long a peer's record is kept without a newer one. A
	// busy key's record is sent again at least every RecordTTL/3. Default:
	// 30s; at least 3 × Interval.
	RecordTTL time.Duration

	// MaxKeys bounds the keys this node tracks; Observe ignores new keys
	// beyond it (counted in Stats.GossipKeysDropped). Keys idle for RecordTTL
	// are forgotten. Default: 100,000.
	MaxKeys int
	// MaxRecords bounds the peers' records this node keeps; records beyond
	// it are dropped (Stats.GossipRecordsDropped). Default: 1,000,000.
	MaxRecords int
	// MaxQueued bounds the records waiting to be gossiped; beyond it the
	// most-sent are dropped. Each Interval queues the hottest keys first.
	// Default: 1,024.
	MaxQueued int
	// MaxStateRecords bounds the records, hottest first, sent in one
	// push/pull state exchange. Default: 8,192.
	MaxStateRecords int
	// LeaveTimeout bounds how long the Limiter's Shutdown (or Close) waits
	// for each of the node's two leave messages to reach a peer: that it is
	// leaving (so the others, while Redis is out of reach, do not count it
	// as possibly cut off), then the leave. Default: 1s.
	LeaveTimeout time.Duration

	// Logger receives memberlist's log lines at their levels, and this
	// package's. Default: none (discarded); nothing goes to stderr.
	Logger *slog.Logger
}

// startNode starts package fallback's gossip node (see
// internal/gossiphook), set when fallback loads.
var startNode = gossiphook.New.(func(gossiphook.Config) (gossiphook.Node, error))

// A lease's digest names a key on the gossip, salted by its rule.
var _ gossiphook.Digest = [lease.DigestSize]byte{}

// gossip is the Limiter's gossip node (Config.Gossip) and its metrics.
type gossip struct {
	node gossiphook.Node
	reg  metric.Registration
	mu   sync.Mutex // orders the breaker's news to the node (gossipOutage)
}

// gossipOutage tells the gossip node, if any, whether the breaker is open:
// while it is, the node's split counts the members declared dead since
// Redis was last reachable, and at least SyncConfig.Nodes. It reads the
// breaker under g.mu, so that of two transitions racing the node hears the
// later last.
func (l *Limiter) gossipOutage() {
	g := l.gossip
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.node.Outage(l.breakerOpen(), l.cfg.Sync.Nodes)
}

// startGossip starts the node cfg describes and registers its figures as
// metrics.
func startGossip(cfg GossipConfig, l *Limiter) (*gossip, error) {
	node, err := startNode(gossiphook.Config(cfg))
	if err != nil {
		if errors.Is(err, gossiphook.ErrInvalidConfig) {
			return nil, fmt.Errorf("%w: Gossip: %w", ErrInvalidConfig, err)
		}
		return nil, fmt.Errorf("hybrid: start gossip: %w", err)
	}
	g := &gossip{node: node}
	if g.reg, err = gossipMetrics(l.cfg.MeterProvider.Meter(meterName), node); err != nil {
		node.Close()
		return nil, fmt.Errorf("%w: MeterProvider: %w", ErrInvalidConfig, err)
	}
	return g, nil
}

func (g *gossip) close() error {
	if g.reg != nil {
		g.reg.Unregister()
	}
	return g.node.Close()
}

// stats sets out's gossip figures from the node's.
func (g *gossip) stats(out *Stats) {
	st := g.node.Stats()
	out.GossipAddr = g.node.Addr()
	out.GossipMembers = g.node.Members() // the estimates' count, as the policy splits by it
	out.GossipKeys = st.Keys
	out.GossipBytesSent, out.GossipBytesReceived = st.BytesSent, st.BytesReceived
	out.GossipRecordsSent, out.GossipRecordsReceived = st.RecordsSent, st.RecordsReceived
	out.GossipRecordsDropped, out.GossipMalformed = st.RecordsDropped, st.Malformed
	out.GossipKeysDropped = st.KeysDropped
}

// gossipMetrics registers the node's Stats as observable instruments, read
// when the SDK collects.
func gossipMetrics(meter metric.Meter, node gossiphook.Node) (metric.Registration, error) {
	members, err := meter.Int64ObservableGauge("hybridlimit.gossip.members",
		metric.WithDescription("Members the gossip splits a limit among: this node, suspected ones, and during an outage those declared dead since."), metric.WithUnit("{node}"))
	if err != nil {
		return nil, err
	}
	bytes, err := meter.Int64ObservableCounter("hybridlimit.gossip.io",
		metric.WithDescription("Bytes of gossip records sent and received, by direction."), metric.WithUnit("By"))
	if err != nil {
		return nil, err
	}
	records, err := meter.Int64ObservableCounter("hybridlimit.gossip.records",
		metric.WithDescription("Gossip records sent, and received newer than held, by direction."), metric.WithUnit("{record}"))
	if err != nil {
		return nil, err
	}
	dropped, err := meter.Int64ObservableCounter("hybridlimit.gossip.records.dropped",
		metric.WithDescription("Gossip records dropped: queue or store full, or malformed."), metric.WithUnit("{record}"))
	if err != nil {
		return nil, err
	}
	sent := metric.WithAttributes(attribute.String("direction", "sent"))
	recv := metric.WithAttributes(attribute.String("direction", "received"))
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := node.Stats()
		o.ObserveInt64(members, int64(st.Members))
		o.ObserveInt64(bytes, int64(st.BytesSent), sent)
		o.ObserveInt64(bytes, int64(st.BytesReceived), recv)
		o.ObserveInt64(records, int64(st.RecordsSent), sent)
		o.ObserveInt64(records, int64(st.RecordsReceived), recv)
		o.ObserveInt64(dropped, int64(st.RecordsDropped))
		return nil
	}, members, bytes, records, dropped)
}

// gossipSalt names a rule's keys on the gossip: a digest of the rule's
// name, combined with each key's lease digest (gossipDigest), so that
// records of one key under two rules stay apart. Every node computes it
// alike.
func gossipSalt(rule string) [lease.DigestSize]byte {
	h := sha256.Sum256([]byte("hybridlimit/gossip\x00" + rule))
	return [lease.DigestSize]byte(h[:lease.DigestSize])
}

// gossipDigest is the gossip's name of the key whose lease digest is d
// under the rule of salt: their XOR, as collision-resistant as the lease
// digest within a rule, and computed without allocating.
func gossipDigest(d, salt *[lease.DigestSize]byte) gossiphook.Digest {
	var out gossiphook.Digest
	for i := range out {
		out[i] = d[i] ^ salt[i]
	}
	return out
}

// setOutage sets what lr's leases do around an outage, whatever the
// policy: once Redis answers again after the breaker opened, no grant is
// taken on top of use in a window the outage touched, and the key is
// decided on its part of the limit there (degraded), so that what a node
// admitted without Redis is never counted beside a lease granted before
// the others reported theirs; and for a while a bucket key's share of the
// rate is no more than the policy's part, as nodes that have not reached
// Redis again go on admitting theirs. Under Gossip with gossip, that part
// is the key's gossip share, and each key's figures go to the gossip node
// at every sync round (off the hot path); under FailLocal, the even split.
func (m *hybridRule) setOutage(lr *lease.Rule) {
	var tap lease.Tap
	switch g := m.l.gossip; {
	case g != nil && m.fail.policy == Gossip:
		tap = func(k *lease.Lease, window, asked, used int64) {
			var limit int64
			if window != 0 { // a window rule: its quota is the window's limit
				limit = m.rs.limit.Load().Params().Quota
			}
			g.node.Report(gossipDigest(&k.Digest, &m.salt), window, asked, used, limit)
		}
		lr.SetShare(func(k *lease.Lease) float64 { return m.estimate(k).Share })
	case m.fail.policy == FailLocal || m.fail.policy == Gossip:
		lr.SetShare(func(*lease.Lease) float64 { return 1 / float64(m.nodes(lr)) })
	}
	lr.SetOutage(tap, true)
}

// gossipLease decides by the gossip estimate on a window rule's lease, in
// e, which the caller holds locked: the node may have admitted, in the
// key's current window, its grant or its own count plus its
// demand-weighted share of what the window has left, whichever is more
// (lease.Lease.Fallback), so that a lease held when Redis failed is used to
// its end first. ok is false for bucket rules.
func (m *hybridRule) gossipLease(e *keyed.Entry[lease.Lease], lr *lease.Rule, now, n int64, charge bool) (local.Decision, bool) {
	w, ok := e.Value.Window(lr, now)
	if !ok {
		return local.Decision{}, false
	}
	est := m.estimate(&e.Value)
	quota := m.rs.limit.Load().Params().Quota
	if m.rs.global {
		quota = max(quota/m.regions(lr), 1) // the region's even part: its gossip sees only its own nodes
	}
	v := e.Value.FallbackIn(lr, now, n, est.AllowanceIn(w, quota), charge)
	return m.fallbackLease(e, lr, v, charge), true
}

// gossipBucket decides by the gossip estimate for a bucket rule's key,
// whose entry e the caller holds locked: on the node's demand-weighted
// share of the rule's rate and burst (an even split while no node has
// gossiped the key).
func (m *hybridRule) gossipBucket(e *keyed.Entry[lease.Lease], now int64, key string, n int64, charge bool) local.Decision {
	return m.fail.byShare(now, key, n, m.estimate(&e.Value).Share, charge)
}

// beginPart starts a bucket key's part under the failure policy from
// what the node held (lease.Lease.PolicyStart): its share's tokens held
// and its part of the pool's tokens, pool; under Gossip its demand share of
// the pool, under FailLocal its even part. FailOpen and FailClosed keep no
// part.
func (m *hybridRule) beginPart(e *keyed.Entry[lease.Lease], gossip bool, nodes, now int64, key string, held, pool int64) {
	f := &m.fail
	switch {
	case gossip:
		share := m.estimate(&e.Value).Share
		if share <= 0 {
			return
		}
		sc := f.scaled(f.rs.limit.Load())
		// byShare charges a request k ÷ share units of part.
		avail := (float64(held) + share*float64(pool)) * float64(sc.k) / share
		f.begin(f.partOn(sc.lim), &sc.lim, now, key, avail)
	case f.policy == FailLocal || f.policy == Gossip || m.l.shut.Load():
		sp := f.evenOn(nodes)
		f.begin(f.partOn(sp.lim), &sp.lim, now, key, float64(held)+float64(pool)/float64(max(sp.nodes, 1)))
	}
}

// estimate is the gossip estimate of k's key. m.salt is set once, in
// newHybridRule, so the hot path reads it without a lock.
func (m *hybridRule) estimate(k *lease.Lease) gossiphook.Estimate {
	return m.l.gossip.node.Estimate(gossipDigest(&k.Digest, &m.salt))
}

// shareScale is how finely byShare divides a bucket by share: part runs on
// the rule's rate and burst × shareScale (or the largest power of two below
// it that the limit's bounds take), and a request of cost n is charged
// ⌈n × scale ÷ share⌉, within 1/scale of its exact cost.
const shareScale = 1024

// shareScaled is the limit byShare's part runs on: base, the rule's limit,
// with rate and burst × k.
type shareScaled struct {
	base *localx.Limit
	lim  localx.Limit
	k    int64
}

// byShare decides a request of cost n for key at now on share (in (0, 1])
// of the rule's rate and burst: a bucket of rate r and burst b charged
// n ÷ share per request admits r × share and b × share, so each key gets
// its own share with no state beyond part's, and a new share applies at
// once to the tokens the key holds. A refusal, a cost above the share's
// burst included, is ReasonLimited; Limit is the rule's, Remaining in
// requests at this share.
func (f *failover) byShare(now int64, key string, n int64, share float64, charge bool) local.Decision {
	lim := f.rs.limit.Load()
	sc := f.scaled(lim)
	part := f.partOn(sc.lim)
	limit := lim.MaxCost()
	cost := math.Ceil(float64(n*sc.k) / share)
	if !(cost <= float64(sc.lim.MaxCost())) {
		// Beyond the share's burst (or no share at all): never admitted at
		// this share, which the next snapshot may raise.
		return localx.Degraded(localx.NewDecision(false, local.ReasonLimited, limit, 0, 0, time.Second))
	}
	d := f.partAllow(part, now, key, int64(cost), charge)
	reason := d.Reason()
	remaining := min(int64(float64(d.Remaining())*share/float64(sc.k)), limit)
	return localx.Degraded(localx.NewDecision(d.Allowed(), reason, limit, remaining, d.ResetAfter(), d.RetryAfter()))
}

// scaled returns the scaled limit byShare's part runs on for lim, the
// rule's limit: the last one made, or a new one if lim changed since.
func (f *failover) scaled(lim *localx.Limit) *shareScaled {
	if sc := f.scale.Load(); sc != nil && sc.base == lim {
		return sc
	}
	return f.rescale(lim)
}

// rescale returns lim with its rate and burst scaled by shareScale, or by
// the largest power of two below it that the limit's bounds take, for part
// to run on.
func (f *failover) rescale(lim *localx.Limit) *shareScaled {
	sc := &shareScaled{base: lim, lim: *lim, k: 1}
	p := lim.Params()
	for k := int64(shareScale); k > 1; k /= 2 {
		q := p
		q.Quota, q.Burst = p.Quota*k, p.Burst*k
		if nl, err := localx.NewLimit(q); err == nil {
			sc.lim, sc.k = nl, k
			break
		}
	}
	f.scale.Store(sc)
	return sc
}

// gossipNodes is the count of nodes a bucket or central rule's limit is
// split among: under Gossip with Config.Gossip, the gossip's members (which a
// node joining during an outage learns at once); else nodes, and always
// for a rule of global reach, whose nodes count every region's.
func (f *failover) gossipNodes(nodes int64) int64 {
	if g := f.rs.l.gossip; g != nil && f.policy == Gossip && !f.rs.global {
		return int64(g.node.Members())
	}
	return nodes
}
