package httplimit

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/ruleitem"
)

// Header names, in canonical form so that they are set without
// canonicalizing.
const (
	hdrXLimit     = "X-Ratelimit-Limit"
	hdrXRemaining = "X-Ratelimit-Remaining"
	hdrXReset     = "X-Ratelimit-Reset"
	hdrPolicy     = "Ratelimit-Policy"
	hdrRateLimit  = "Ratelimit"
	hdrRetryAfter = "Retry-After"
)

// problemType is the type of the problem+json body of a refusal: the
// quota-exceeded problem type of draft-ietf-httpapi-ratelimit-headers-11.
const problemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// unavailableProblemType is the type of the problem+json body of a refusal
// made without Redis by FailClosed rules (Config.UnavailableStatus): the
// limiter could not decide, and its rules refuse rather than guess. The
// body names those rules in "unavailable-policies".
const unavailableProblemType = "https://github.com/hybridlimit/hybridlimit/blob/main/docs/http.md#redis-failures"

// item is one matched rule of a request and its decision.
type item struct {
	c *compiledRule
	t *target // c's limit that decides the request: its own or an override
	ruleitem.Item
}

// RuleItem returns its ruleitem.Item, for ruleitem's functions.
func (it *item) RuleItem() *ruleitem.Item { return &it.Item }

// scratch is one request's working memory, pooled so that a request
// allocates none of it.
type scratch struct {
	items []item
	batch ruleitem.Batch
	buf   []byte
	path  []byte    // the bytes of the request path's readings (paths.buf)
	names [6]string // the headers whose values are in buf, in order
	ends  [6]int    // where their values end in buf
	n     int       // how many values buf holds
}

// maxPooledPath is the most room for a request path's readings that a
// pooled scratch keeps.
const maxPooledPath = 4 << 10

// Handler returns next behind the middleware. The method value m.Handler
// is a func(http.Handler) http.Handler, as routers take middleware.
// Responses share the slices of the rate-limit header values that do not
// change per request: next may replace them (Set, Add, Del), not write into
// them.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

// request holds what a request's keys are made of, each looked up once
// and only when a rule needs it.
type request struct {
	r                      *http.Request
	ip, apiKey, user, tier string
	haveIP, haveKey        bool
	haveUser, okUser       bool
	haveTier               bool
	paths                  paths // read when a rule has a path to match
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	set := m.set.Load()
	if set == nil || len(set.rules) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	sc := m.pool.Get().(*scratch)
	pass := m.limit(w, r, set, sc)
	m.pool.Put(sc)
	if pass {
		next.ServeHTTP(w, r)
	}
}

// limit decides r, sets the response's rate-limit headers, and answers a
// refusal itself. It reports whether the request passes to the next
// handler. sc is not used after it returns.
func (m *Middleware) limit(w http.ResponseWriter, r *http.Request, set *ruleSet, sc *scratch) bool {
	sc.items = sc.items[:0]
	var cost int64
	if m.cfg.Cost != nil {
		cost = m.cfg.Cost(r)
	}
	q := request{r: r}
	q.paths.buf = sc.path[:0]
	for _, c := range set.rules {
		if !c.pat.match(r, &q.paths) {
			continue
		}
		key, ok := m.key(&q, c.key)
		if !ok {
			continue
		}
		t, ok := ruleitem.Choose(c.base, c.tier, c.over, key, func() string { return m.tier(&q) })
		if !ok {
			continue
		}
		n := c.cost
		if cost > 0 {
			n = cost
		}
		sc.items = append(sc.items, item{c: c, t: t, Item: ruleitem.Item{Req: hybrid.Request{Rule: t.rule, Key: key, N: n}, Shadow: c.shadow || m.cfg.Shadow}})
	}
	if cap(q.paths.buf) <= maxPooledPath {
		sc.path = q.paths.buf // keep the room it grew, not a huge path's
	}
	if len(sc.items) == 0 {
		return true
	}
	defer func() { clear(sc.items); sc.batch.Clear() }() // keep no request's keys in the pool
	admitted, decided := m.decide(r, set, sc, false)
	if !decided {
		if now := m.set.Load(); now != set {
			// SetRules unregistered a rule of set, which this request
			// matched: it is decided on the rules in force instead.
			return m.limit(w, r, now, sc)
		}
		return true // the Limiter was misused (logged): the request passes
	}
	if admitted {
		if ok, _ := m.decide(r, set, sc, true); !ok {
			m.met.ShadowRefused.Add(r.Context(), 1)
		}
	}
	m.writeHeaders(w, sc, admitted)
	if !admitted {
		m.met.Refused.Add(r.Context(), 1)
		m.refuse(w, sc)
	} else {
		m.met.Admitted.Add(r.Context(), 1)
	}
	return admitted
}

// key returns the key of a rule of type t, and false when the request has
// none.
func (m *Middleware) key(q *request, t KeyType) (string, bool) {
	switch t {
	case KeyIP:
		if !q.haveIP {
			q.ip, q.haveIP = m.ip.Key(m.ip.Resolve(q.r.RemoteAddr, q.r.Header)), true
		}
		return q.ip, true
	case KeyAPIKey:
		return m.apiKey(q), q.apiKey != ""
	default:
		if !q.haveUser {
			q.haveUser = true
			if m.cfg.UserFunc != nil {
				q.user, q.okUser = m.cfg.UserFunc(q.r)
			}
		}
		return q.user, q.okUser && q.user != ""
	}
}

func (m *Middleware) apiKey(q *request) string {
	if !q.haveKey {
		q.haveKey = true
		if v := q.r.Header[m.apiKeyHeader]; len(v) > 0 {
			q.apiKey = v[0]
		}
	}
	return q.apiKey
}

// tier returns the request's tier: its API key's.
func (m *Middleware) tier(q *request) string {
	if !q.haveTier {
		q.haveTier = true
		if k := m.apiKey(q); k != "" {
			if m.cfg.TierFunc != nil {
				q.tier = m.cfg.TierFunc(k)
			} else {
				q.tier = m.cfg.Tiers[k]
			}
		}
	}
	return q.tier
}

// decide decides the shadow items, or the enforced ones, all or nothing,
// and writes their decisions. It reports whether they were admitted, and
// whether they were decided at all: false when the Limiter reports misuse
// (logged), which lets the request pass, or a rule of set that SetRules
// has unregistered since (not logged).
func (m *Middleware) decide(r *http.Request, set *ruleSet, sc *scratch, shadow bool) (admitted, decided bool) {
	admitted, err := ruleitem.Decide(r.Context(), m.l, sc.items, &sc.batch, shadow)
	switch {
	case errors.Is(err, hybrid.ErrUnknownRule):
		if m.set.Load() != set {
			return true, false // the rules changed under the request
		}
		m.met.Errors.Add(r.Context(), 1)
		m.cfg.Logger.Error("httplimit: the limiter could not decide; the request passes", "err", err)
		return true, false
	case err != nil:
		// Redis answered with an error (a key of another type under the
		// prefix): the decisions are the failure policies', and are
		// served as they say. The Limiter logs and counts the error.
		m.met.Errors.Add(r.Context(), 1)
	}
	if ruleitem.Degraded(sc.items, shadow) {
		m.met.Degraded.Add(r.Context(), 1)
	}
	return admitted, true
}

// writeHeaders sets the rate-limit headers of the decided items, and
// Retry-After on a refusal. The values formatted once per rule set (the
// limit, a single policy item) are shared; the others are built in one
// buffer, then copied into a header block: one allocation (two when they
// are too long for one).
func (m *Middleware) writeHeaders(w http.ResponseWriter, sc *scratch, admitted bool) {
	hi := ruleitem.Headline(sc.items, admitted)
	hdr := w.Header()
	sc.buf, sc.n = sc.buf[:0], 0
	if hi < 0 {
		// No limit decided: no figures to tell, but when to come back.
		if !admitted {
			m.setInt(hdr, sc, hdrRetryAfter, m.retryAfter(sc))
			m.flushHeaders(hdr, sc)
		}
		return
	}
	h := &sc.items[hi]
	if !m.cfg.DisableXRateLimit {
		if lim := h.D.Capacity(); lim == h.t.limit {
			hdr[hdrXLimit] = h.t.xLim
		} else {
			m.setInt(hdr, sc, hdrXLimit, lim)
		}
		m.setInt(hdr, sc, hdrXRemaining, h.D.Remaining())
		t := h.Reset()
		if m.cfg.ResetUnix {
			t += m.cfg.Clock.Now().Unix()
		}
		m.setInt(hdr, sc, hdrXReset, t)
	}
	if m.cfg.RateLimitHeaders {
		m.policy(hdr, sc, admitted)
		sc.buf = ruleitem.AppendRateLimit(sc.buf, h.c.id, h.D.Remaining(), h.Reset())
		sc.end(hdrRateLimit)
	}
	if !admitted {
		m.setInt(hdr, sc, hdrRetryAfter, m.retryAfter(sc))
	}
	m.flushHeaders(hdr, sc)
}

// flushHeaders copies the header values built in sc.buf into hdr.
func (m *Middleware) flushHeaders(hdr http.Header, sc *scratch) {
	if sc.n == 0 {
		return
	}
	b, n := sc.buf, sc.n
	var vals []string
	var str string
	// One allocation: the values' bytes and the backing array of their
	// slices together, in the smaller block they fit; the bytes are never
	// written again, so the strings may point into them.
	switch {
	case n == 1 && len(b) <= len(headerBlock1{}.buf):
		blk := new(headerBlock1)
		copy(blk.buf[:], b)
		str, vals = unsafe.String(&blk.buf[0], len(b)), blk.vals[:]
	case n <= 3 && len(b) <= len(headerBlock3{}.buf):
		blk := new(headerBlock3)
		copy(blk.buf[:], b)
		str, vals = unsafe.String(&blk.buf[0], len(b)), blk.vals[:n]
	case len(b) <= len(headerBlock6{}.buf):
		blk := new(headerBlock6)
		copy(blk.buf[:], b)
		str, vals = unsafe.String(&blk.buf[0], len(b)), blk.vals[:n]
	default:
		str, vals = string(b), make([]string, n)
	}
	start := 0
	for i := range n {
		vals[i] = str[start:sc.ends[i]]
		start = sc.ends[i]
		hdr[sc.names[i]] = vals[i : i+1 : i+1]
	}
}

// setInt sets header name to v: a shared value when v is small, else one
// formatted in sc.buf.
func (m *Middleware) setInt(hdr http.Header, sc *scratch, name string, v int64) {
	if v >= 0 && v < int64(len(m.small)) {
		hdr[name] = m.small[v : v+1 : v+1]
		return
	}
	sc.buf = strconv.AppendInt(sc.buf, v, 10)
	sc.end(name)
}

// end ends the value of header name in sc.buf.
func (sc *scratch) end(name string) {
	sc.names[sc.n], sc.ends[sc.n] = name, len(sc.buf)
	sc.n++
}

// policy sets RateLimit-Policy: one item per decided item, each formatted
// once per rule set; a single one is shared as it is.
func (m *Middleware) policy(hdr http.Header, sc *scratch, admitted bool) {
	var one *item
	count := 0
	for i := range sc.items {
		if it := &sc.items[i]; it.Decided(admitted) && it.Figures() {
			one = it
			count++
		}
	}
	if count == 1 && one.D.Capacity() == one.t.limit {
		hdr[hdrPolicy] = one.t.item
		return
	}
	first := true
	for i := range sc.items {
		it := &sc.items[i]
		if !it.Decided(admitted) || !it.Figures() {
			continue
		}
		if !first {
			sc.buf = append(sc.buf, ", "...)
		}
		first = false
		if it.D.Capacity() == it.t.limit {
			sc.buf = append(sc.buf, it.t.item[0]...)
			continue
		}
		sc.buf = ruleitem.AppendPolicy(sc.buf, it.c.id, it.D.Capacity(), it.c.window)
	}
	sc.end(hdrPolicy)
}

// headerBlock1, headerBlock3 and headerBlock6 hold a response's rate-limit
// header values: their bytes, and the backing array of their one-element
// slices, in one allocation. headerBlock1 (32 bytes) fits one number of up
// to 16 digits, the X-RateLimit-* fields' own when the others are shared;
// headerBlock3 (80 bytes), up to three values in 32 bytes.
type headerBlock1 struct {
	vals [1]string
	buf  [16]byte
}

type headerBlock3 struct {
	vals [3]string
	buf  [32]byte
}

type headerBlock6 struct {
	vals [6]string
	buf  [112]byte
}

// smallInts returns the header values of 0 to maxSmallInt, read-only,
// their digits in one string; header maps share one-element slices of it
// (see target).
var smallInts = sync.OnceValue(func() []string {
	const n = maxSmallInt + 1
	var b []byte
	var ends [n]int
	for i := range n {
		b = strconv.AppendInt(b, int64(i), 10)
		ends[i] = len(b)
	}
	str, vals, start := string(b), make([]string, n), 0
	for i := range n {
		vals[i], start = str[start:ends[i]], ends[i]
	}
	return vals
})

// maxSmallInt is the largest number with a shared header value: an hour in
// seconds, so that Reset and Retry-After of windows up to an hour, and
// what is left of limits up to 3600, are not formatted per response.
const maxSmallInt = 3600

// retryAfter returns Retry-After in seconds: the longest wait among the
// violated rules, jittered, rounded up, at least 1.
func (m *Middleware) retryAfter(sc *scratch) int64 {
	var d time.Duration
	for i := range sc.items {
		if it := &sc.items[i]; !it.Shadow && it.Violated() {
			d = max(d, time.Duration(it.Reset())*time.Second, it.D.RetryAfter())
		}
	}
	if m.cfg.RetryJitter > 0 {
		d += rand.N(m.cfg.RetryJitter + 1)
	}
	return max(ruleitem.Seconds(d), 1)
}

// refuse answers 429 with a problem+json body naming the violated
// policies; or, when only FailClosed rules refused, unable to reach Redis,
// Config.UnavailableStatus with a body of unavailableProblemType naming
// them.
func (m *Middleware) refuse(w http.ResponseWriter, sc *scratch) {
	status, quota := http.StatusTooManyRequests, ruleitem.QuotaRefused(sc.items)
	b := sc.buf[:0]
	if quota {
		b = append(b, `{"type":"`+problemType+`","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"violated-policies":[`...)
	} else {
		status = m.cfg.UnavailableStatus
		b = append(b, `{"type":"`+unavailableProblemType+`","title":"The rate limiter cannot decide: its shared store is unavailable","status":`...)
		b = strconv.AppendInt(b, int64(status), 10)
		b = append(b, `,"unavailable-policies":[`...)
	}
	first := true
	for i := range sc.items {
		if it := &sc.items[i]; !it.Shadow && it.Violated() && (quota || it.Unavailable()) {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = ruleitem.AppendName(b, it.c.id)
		}
	}
	b = append(b, "]}\n"...)
	sc.buf = b
	hdr := w.Header()
	hdr["Content-Type"] = []string{"application/problem+json"}
	hdr["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	w.Write(b) //nolint:errcheck // the client is gone; nothing to do
}
