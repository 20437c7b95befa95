package hybrid

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/local"
)

// meterName follows the OpenTelemetry convention: the instrumented package's
// import path.
const meterName = "github.com/hybridlimit/hybridlimit/hybrid"

// counters are a rule's decisions by reason. They are striped: a decision
// adds to one of stripes words picked at random, so cores deciding for the
// same rule rarely share a cache line; a collection sums them.
type counters struct {
	stripes  [stripes]stripe
	fallback atomic.Int64 // degraded decisions: made by the failure policy, or after Shutdown
	other    atomic.Int64 // requests of a multi-rule decision this rule had room for, refused by another rule
	// waits are the hybrid decisions that waited for their key's exchange,
	// by result (ReasonOK for admitted): off the hot path, not striped.
	waits [numReasons]atomic.Int64
}

const stripes = 8

type stripe struct {
	n [numReasons]atomic.Int64
	_ [64 - (numReasons*8)%64]byte
}

// numReasons covers every local.Reason.
const numReasons = int(local.ReasonUnavailable) + 1

func (c *counters) count(r local.Reason) {
	if int(r) < numReasons {
		c.stripes[rand.Uint32()%stripes].n[r].Add(1)
	}
}

// countOther counts a request this rule had room for, in a multi-rule
// decision another rule refused.
func (c *counters) countOther() { c.other.Add(1) }

// decision counts d: admitted, or by the reason it was refused, and among
// the degraded decisions when it is one.
func (c *counters) decision(d local.Decision) {
	if d.Degraded() {
		c.fallback.Add(1)
	}
	if d.Allowed() {
		c.count(local.ReasonOK) // FailOpen's ReasonUnavailable included
	} else {
		c.count(d.Reason())
	}
}

func (c *counters) sum(r local.Reason) int64 {
	var t int64
	for i := range c.stripes {
		t += c.stripes[i].n[r].Load()
	}
	return t
}

// metrics are the Limiter's OpenTelemetry instruments. Per-decision figures
// are read from the counters when the SDK collects, never per decision; no
// attribute carries a user key or address (cardinality and privacy): only
// rule names, modes and results. Every instrument with a rule attribute is
// observable: a rule's series end with its Unregister, where the SDK keeps
// a synchronous instrument's every attribute set for the process's life.
type metrics struct {
	reg          metric.Registration
	rounds       metric.Int64Counter
	roundKeys    metric.Int64Counter
	roundErrors  metric.Int64Counter
	roundSeconds metric.Float64Histogram
	modeChanges  metric.Int64Counter
	waitSeconds  metric.Float64Histogram
	redisErrors  metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider, l *Limiter) (*metrics, error) {
	meter := mp.Meter(meterName)
	b := &instruments{meter: meter}
	m := &metrics{
		rounds:       b.counter("hybridlimit.sync.rounds", "Sync rounds of the hybrid mode.", "{round}"),
		roundKeys:    b.counter("hybridlimit.sync.keys", "Keys exchanged with Redis by sync rounds.", "{key}"),
		roundErrors:  b.counter("hybridlimit.sync.errors", "Keys whose exchange with Redis failed.", "{key}"),
		roundSeconds: b.histogram("hybridlimit.sync.duration", "Duration of sync rounds.", "s", roundBuckets),
		waitSeconds:  b.histogram("hybridlimit.lease.wait.duration", "How long hybrid decisions waited for their key's exchange with Redis, every rule's.", "s", waitBuckets),
		redisErrors:  b.counter("hybridlimit.redis.errors", "Calls and sync rounds Redis failed, by kind: the first word of its error answer (OOM, MISCONF, READONLY, WRONGTYPE, …), timeout, or unreachable.", "{error}"),
		modeChanges:  b.counter("hybridlimit.mode.changes", "Switches between Redis deciding and failure policies deciding, by the mode switched to.", "{change}"),
	}
	ob := observed{
		decisions: b.observedCounter("hybridlimit.decisions", "Decisions, by rule, mode and result.", "{decision}"),
		fallbacks: b.observedCounter("hybridlimit.policy.decisions", "Decisions made without Redis (Decision.Degraded): by a failure policy while Redis could not decide, or on this node's part of the limit after Shutdown.", "{decision}"),
		keys:      b.gauge("hybridlimit.keys", "Keys held in memory, by rule.", "{key}"),
		evictions: b.observedCounter("hybridlimit.evictions", "Keys forgotten once back in their initial state, by rule.", "{key}"),
		overflows: b.observedCounter("hybridlimit.overflows", "Requests for new keys refused because the key table was full, by rule.", "{request}"),
		available: b.gauge("hybridlimit.redis.available", "1 while Redis answers, 0 while failure policies apply.", "1"),
		waits:     b.observedCounter("hybridlimit.lease.waits", "Hybrid decisions that waited for their key's exchange with Redis (Rule.Wait), by rule and result; hybridlimit.decisions counts them too.", "{decision}"),
		rules:     b.gauge("hybridlimit.rules", "Rules registered, by mode.", "{rule}"),
		memory:    b.gauge("hybridlimit.memory", "Estimated heap bytes the rules hold: their fixed parts, tables of keys and entries (Limiter.Stats).", "By"),
	}
	if l.cfg.Global != nil {
		ob.region = attribute.String("region", l.cfg.Region)
		ob.globalRounds = b.observedCounter("hybridlimit.global.rounds", "Rounds this node led as its region's exchanger with the global store (rules of global reach), by region and result (ok, failed).", "{round}")
		ob.globalKeys = b.gauge("hybridlimit.global.keys", "Keys the last round this node led exchanged with the global store, by region.", "{key}")
	}
	if b.err != nil {
		return nil, b.err
	}
	var err error
	m.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		ob.observe(l, o)
		return nil
	}, ob.instruments()...)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// instruments makes a meter's instruments, keeping the first error.
type instruments struct {
	meter metric.Meter
	err   error
}

func (b *instruments) keep(err error) {
	if b.err == nil {
		b.err = err
	}
}

func (b *instruments) counter(name, desc, unit string) metric.Int64Counter {
	c, err := b.meter.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
	b.keep(err)
	return c
}

// The buckets of the duration histograms, in seconds: the SDK's default
// boundaries (0, 5, 10, … 10,000) would put every round and every wait in
// the first.
var (
	roundBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
	waitBuckets  = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
)

func (b *instruments) histogram(name, desc, unit string, buckets []float64) metric.Float64Histogram {
	h, err := b.meter.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit(unit), metric.WithExplicitBucketBoundaries(buckets...))
	b.keep(err)
	return h
}

func (b *instruments) observedCounter(name, desc, unit string) metric.Int64ObservableCounter {
	c, err := b.meter.Int64ObservableCounter(name, metric.WithDescription(desc), metric.WithUnit(unit))
	b.keep(err)
	return c
}

func (b *instruments) gauge(name, desc, unit string) metric.Int64ObservableGauge {
	g, err := b.meter.Int64ObservableGauge(name, metric.WithDescription(desc), metric.WithUnit(unit))
	b.keep(err)
	return g
}

// observed are the instruments read at collection time, from the rules'
// counters and tables.
type observed struct {
	decisions, fallbacks, evictions, overflows, waits metric.Int64ObservableCounter
	keys, available, rules, memory                    metric.Int64ObservableGauge
	// the exchanges with the global store, with Config.Global only
	globalRounds metric.Int64ObservableCounter
	globalKeys   metric.Int64ObservableGauge
	region       attribute.KeyValue
}

// instruments lists the instruments observe reports.
func (ob observed) instruments() []metric.Observable {
	out := []metric.Observable{ob.decisions, ob.fallbacks, ob.keys, ob.evictions, ob.overflows, ob.available, ob.waits, ob.rules, ob.memory}
	if ob.globalRounds != nil {
		out = append(out, ob.globalRounds, ob.globalKeys)
	}
	return out
}

// observeGlobal reports the node's exchanges with the global store.
func (ob observed) observeGlobal(l *Limiter, o metric.Observer) {
	if ob.globalRounds == nil || l.sync == nil {
		return
	}
	g := l.sync.GlobalStats()
	o.ObserveInt64(ob.globalRounds, g.Rounds-g.Failed, metric.WithAttributes(ob.region, attribute.String("result", "ok")))
	o.ObserveInt64(ob.globalRounds, g.Failed, metric.WithAttributes(ob.region, attribute.String("result", "failed")))
	o.ObserveInt64(ob.globalKeys, g.Keys, metric.WithAttributes(ob.region))
}

// observe reports l's figures to o.
func (ob observed) observe(l *Limiter, o metric.Observer) {
	up := int64(1)
	if l.unavailable.Load() != 0 {
		up = 0
	}
	o.ObserveInt64(ob.available, up)
	l.mu.Lock()
	rules := make([]*ruleState, 0, len(l.rules))
	for _, rs := range l.rules {
		rules = append(rules, rs)
	}
	l.mu.Unlock()
	var byMode [Hybrid + 1]int64
	var bytes int64
	for _, rs := range rules {
		byMode[rs.mode.kind()]++
		bytes += ob.observeRule(rs, o)
	}
	for m := Local; m <= Hybrid; m++ {
		o.ObserveInt64(ob.rules, byMode[m], metric.WithAttributes(attribute.String("mode", m.String())))
	}
	o.ObserveInt64(ob.memory, bytes)
	ob.observeGlobal(l, o)
}

// observeRule reports rs's figures to o and returns the bytes it holds.
func (ob observed) observeRule(rs *ruleState, o metric.Observer) int64 {
	ra := attribute.String("rule", rs.name)
	ma := attribute.String("mode", rs.mode.kind().String())
	for r := local.Reason(0); int(r) < numReasons; r++ {
		if v := rs.counts.sum(r); v > 0 {
			o.ObserveInt64(ob.decisions, v, metric.WithAttributes(ra, ma, attribute.String("result", resultOf(r))))
		}
	}
	if v := rs.counts.other.Load(); v > 0 {
		o.ObserveInt64(ob.decisions, v, metric.WithAttributes(ra, ma, attribute.String("result", resultOther)))
	}
	for r := local.Reason(0); int(r) < numReasons; r++ {
		if v := rs.counts.waits[r].Load(); v > 0 {
			o.ObserveInt64(ob.waits, v, metric.WithAttributes(ra, attribute.String("result", resultOf(r))))
		}
	}
	o.ObserveInt64(ob.fallbacks, rs.counts.fallback.Load(), metric.WithAttributes(ra))
	st := rs.mode.stats()
	o.ObserveInt64(ob.keys, int64(st.Keys), metric.WithAttributes(ra, ma))
	o.ObserveInt64(ob.evictions, int64(st.Evictions), metric.WithAttributes(ra, ma))
	o.ObserveInt64(ob.overflows, int64(st.Overflows), metric.WithAttributes(ra, ma))
	return rs.bytes(st)
}

// resultOther is the result of a request of a multi-rule decision that
// its rule had room for, refused by another rule.
const resultOther = "other_rule"

// resultOf names a decision's result for the metric's attribute: "admitted"
// or the reason it was refused.
func resultOf(r local.Reason) string {
	if r == local.ReasonOK {
		return "admitted"
	}
	return r.String()
}

func (m *metrics) round(st synchook.RoundStats) {
	ctx := context.Background()
	m.rounds.Add(ctx, 1)
	m.roundKeys.Add(ctx, int64(st.Synced))
	if st.Failed > 0 {
		m.roundErrors.Add(ctx, int64(st.Failed))
	}
	m.roundSeconds.Record(ctx, st.Took.Seconds())
}

// waited counts d, a decision of rs that waited for its key's exchange,
// and how long it waited. Off the hot path: only waits come here.
func (m *metrics) waited(rs *ruleState, took time.Duration, d local.Decision) {
	r := d.Reason()
	if d.Allowed() {
		r = local.ReasonOK
	}
	if int(r) < numReasons {
		rs.counts.waits[r].Add(1)
	}
	m.waitSeconds.Record(context.Background(), took.Seconds())
}

// redisError counts a failure of Redis's of kind (errorKind).
func (m *metrics) redisError(kind string) {
	m.redisErrors.Add(context.Background(), 1, metric.WithAttributes(attribute.String("error", kind)))
}

// modeChanged counts a switch to Redis available (to "redis") or to the
// failure policies (to "policy").
func (m *metrics) modeChanged(available bool) {
	to := "policy"
	if available {
		to = "redis"
	}
	m.modeChanges.Add(context.Background(), 1, metric.WithAttributes(attribute.String("to", to)))
}

func (m *metrics) close() {
	if m.reg != nil {
		m.reg.Unregister()
	}
}
