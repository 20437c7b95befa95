package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// node is a descriptor of the tree a snapshot matches requests against.
type node struct {
	children  map[string]*node // by key_value and by key alone (nodeKey)
	wildcards []wildcard       // values ending in "*", in file order
	limit     *limit           // nil: no limit ends here
}

// wildcard is a child matched by a prefix of its key_value.
type wildcard struct {
	prefix string // key_ and the value before its "*"
	n      *node
}

// limit is a node's limit as a snapshot holds it; read-only once built.
type limit struct {
	spec     limitSpec
	fullKey  string // domain.key_value.key…, envoyproxy/ratelimit's
	name     string // RateLimit.Name, for Replaces
	replaces []string
	shadow   bool
	detailed bool         // detailed_metric: metrics name the request's descriptor, not fullKey
	rule     *hybrid.Rule // nil when unlimited or RequestsPerUnit is 0
	ruleName string
	// proto is the current_limit of every status under this limit,
	// shared by the responses and never written after the build.
	proto *rlsv3.RateLimitResponse_RateLimit
	// policyItem is the limit's RateLimit-Policy item: "name";q=…;w=….
	policyItem string
	// itemName is the quoted name items start with.
	itemName string
}

// snapshot is the configuration a Service decides with: one tree per
// domain. Read-only once built; Apply swaps in a new one.
type snapshot struct {
	domains map[string]*node
}

// build compiles files into a snapshot. Its limits' rules are registered
// afterwards (Service.register), which sets their rule fields.
func build(files []*File) (*snapshot, error) {
	s := &snapshot{domains: make(map[string]*node, len(files))}
	for _, f := range files {
		if err := f.check(); err != nil {
			return nil, err
		}
		if _, dup := s.domains[f.Domain]; dup {
			return nil, fileError("", "duplicate domain %q", f.Domain)
		}
		root := &node{}
		buildLevel(root, f.Domain, f.Descriptors)
		s.domains[f.Domain] = root
	}
	return s, nil
}

func buildLevel(parent *node, path string, ds []Descriptor) {
	if len(ds) == 0 {
		return
	}
	parent.children = make(map[string]*node, len(ds))
	for i := range ds {
		d := &ds[i]
		k := nodeKey(d.Key, d.Value)
		full := path + "." + k
		n := &node{}
		if r := d.RateLimit; r != nil {
			spec, _ := r.spec(full) // checked by File.check
			l := &limit{spec: spec, fullKey: full, name: r.Name, shadow: d.ShadowMode, detailed: d.DetailedMetric}
			for _, rp := range r.Replaces {
				l.replaces = append(l.replaces, rp.Name)
			}
			if !spec.unlimited {
				l.proto = &rlsv3.RateLimitResponse_RateLimit{
					Name: r.Name, RequestsPerUnit: r.RequestsPerUnit,
					Unit: rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[spec.unit]),
				}
				itemName := r.Name
				if itemName == "" {
					itemName = full
				}
				l.itemName = sfString(itemName)
				l.policyItem = l.itemName + ";q=" + strconv.FormatInt(spec.quota, 10) + ";w=" + strconv.FormatInt(int64(spec.window/time.Second), 10)
				if spec.quota > 0 {
					l.ruleName = ruleName(full, spec)
				}
			}
			n.limit = l
		}
		buildLevel(n, full, d.Descriptors)
		parent.children[k] = n
		if d.Value != "" && strings.HasSuffix(d.Value, "*") {
			parent.wildcards = append(parent.wildcards, wildcard{prefix: strings.TrimSuffix(k, "*"), n: n})
		}
	}
}

// ruleName names the Limiter's rule of the limit at fullKey: a digest, as
// a full key may be longer than a rule name or hold other characters. It
// is the same on every replica, so they share the limit's state in Redis,
// and it changes with the algorithm, mode, policy, wait and reach, which
// a registered rule keeps (the limit itself moves by SetLimit). A limit
// of global reach adds to the digest, so the others' names stay as they
// were.
func ruleName(fullKey string, sp limitSpec) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s", fullKey, sp.limit.Algorithm, sp.mode, sp.policy, sp.wait)
	if sp.global {
		h.Write([]byte("\x00global"))
	}
	return "rls:" + hex.EncodeToString(h.Sum(nil)[:12])
}

// sfString quotes s as a structured field string: printable ASCII, with
// '"' and '\' escaped; other bytes become '_'.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// match returns the limit of descriptor d in domain's tree, nil if none,
// as envoyproxy/ratelimit matches: at each level the entry's key_value,
// then a wildcard prefix, then its key alone; the limit is the one of the
// node the last entry reaches, so a request descriptor with more or fewer
// entries than a limit's depth does not match it.
func (s *snapshot) match(domain string, d *commonv3.RateLimitDescriptor) *limit {
	root := s.domains[domain]
	if root == nil {
		return nil
	}
	level := root
	entries := d.GetEntries()
	var kv []byte
	for i, e := range entries {
		kv = append(append(append(kv[:0], e.GetKey()...), '_'), e.GetValue()...)
		next := level.children[string(kv)]
		if next == nil {
			for _, w := range level.wildcards {
				if strings.HasPrefix(string(kv), w.prefix) {
					next = w.n
					break
				}
			}
		}
		if next == nil {
			next = level.children[e.GetKey()]
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			return next.limit
		}
		if len(next.children) == 0 {
			return nil
		}
		level = next
	}
	return nil
}

// limits calls f with each limit of the snapshot.
func (s *snapshot) limits(f func(*limit)) {
	var walk func(n *node)
	walk = func(n *node) {
		if n.limit != nil {
			f(n.limit)
		}
		for _, c := range n.children {
			walk(c)
		}
	}
	for _, root := range s.domains {
		walk(root)
	}
}
