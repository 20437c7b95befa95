package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// ErrInvalidConfig is wrapped by every error about a configuration: a
// rate limit file that does not parse or names a bad field (a *FileError),
// or a bad field of Config.
var ErrInvalidConfig = errors.New("rls: invalid configuration")

// Bounds on a configuration file, so that one from a broken source costs
// little to refuse.
const (
	// maxFileSize is the most bytes a file may have.
	maxFileSize = 1 << 20
	// maxDepth is the deepest nesting of descriptors.
	maxDepth = 16
	// maxDescriptors is the most descriptors a file may hold, at every
	// level together.
	maxDescriptors = 10000
)

// File is one rate limit configuration file, in envoyproxy/ratelimit's
// format: a domain and its tree of descriptors. Parse reads one.
type File struct {
	// Domain names the set of limits; a RateLimitRequest's domain selects
	// it. Required, unique among the files a Service holds.
	Domain string `yaml:"domain"`
	// Descriptors are the first level of the tree.
	Descriptors []Descriptor `yaml:"descriptors"`
}

// Descriptor is a node of a domain's tree: a key, an optional value, an
// optional limit and the nodes beneath it.
type Descriptor struct {
	// Key is the descriptor entry's key it matches. Required.
	Key string `yaml:"key"`
	// Value is the entry's value it matches. Empty: any value, each value
	// counted apart. A value ending in "*" matches every value with that
	// prefix (each counted apart).
	Value string `yaml:"value"`
	// RateLimit is the limit of a request descriptor that ends at this
	// node. Nil: none (a node only for the ones beneath it, or, without
	// those, one that admits everything).
	RateLimit *RateLimit `yaml:"rate_limit"`
	// Descriptors are the nodes matched by the request descriptor's next
	// entry.
	Descriptors []Descriptor `yaml:"descriptors"`
	// ShadowMode decides and counts as usual, but the descriptor's status
	// is always OK and it never makes the overall code OVER_LIMIT.
	ShadowMode bool `yaml:"shadow_mode"`
	// DetailedMetric names the request's own descriptor in the
	// hybridlimit.envoy.hits metric (its values where the configuration
	// matched a key alone or a wildcard), not the configuration's key, as
	// envoyproxy/ratelimit's detailed stats do: one series per distinct
	// value, so for descriptors of few values.
	DetailedMetric bool `yaml:"detailed_metric"`
}

// RateLimit is a node's limit: envoyproxy/ratelimit's fields, and the
// optional fields that choose this library's algorithm, mode, failure
// policy, wait and reach (each empty by default: a fixed window, as
// envoyproxy/ratelimit counts, in the Limiter's default mode and policy).
type RateLimit struct {
	// Unit is the window: second, minute, hour, day, week, month (30
	// days) or year (365 days), in any case. Required unless Unlimited.
	Unit string `yaml:"unit"`
	// RequestsPerUnit is the limit per window. Zero refuses every request
	// (OVER_LIMIT), as in envoyproxy/ratelimit.
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	// Unlimited admits every request without counting it: status OK,
	// limit_remaining 4294967295. Unit must then be empty.
	Unlimited bool `yaml:"unlimited"`
	// Name names the limit, for Replaces; it is also the name of the
	// RateLimit-Policy item (default: the node's full key).
	Name string `yaml:"name"`
	// Replaces names limits that this one replaces: when a request's
	// descriptors match both, the replaced one is not evaluated (status
	// OK, not counted).
	Replaces []Replace `yaml:"replaces"`

	// Algorithm is this library's algorithm for the limit:
	// fixed_window (the default, envoyproxy/ratelimit's),
	// sliding_window_counter, sub_window_counter, token_bucket,
	// leaky_bucket or gcra. (The sliding window log is refused: it keeps
	// a timestamp per request.)
	Algorithm string `yaml:"algorithm"`
	// Burst is the bucket algorithms' burst (token_bucket, leaky_bucket,
	// gcra). Default: RequestsPerUnit.
	Burst int64 `yaml:"burst"`
	// Mode is where decisions are made: hybrid, central or local. Default:
	// the Limiter's (hybrid with Redis).
	Mode string `yaml:"mode"`
	// Policy is what decides when Redis cannot: gossip, fail_local,
	// fail_open or fail_closed. Default: the Limiter's (gossip with gossip
	// configured, fail_local without).
	Policy string `yaml:"policy"`
	// Wait is whether a hybrid request that only an exchange with Redis
	// can decide waits for it: in_flight (the default), never or first.
	Wait string `yaml:"wait"`
	// Global holds the limit across every region, not only this region's
	// cluster (hybrid.Rule.Global): a fixed_window limit in hybrid mode,
	// on a Limiter with hybrid.Config.Global. Default false.
	Global bool `yaml:"global"`
}

// Replace names a limit a RateLimit replaces.
type Replace struct {
	// Name is the replaced limit's RateLimit.Name. Required.
	Name string `yaml:"name"`
}

// FileError is a configuration file's error: where it is and why.
type FileError struct {
	// Path is the descriptor's place in the file, as domain.key_value.key
	// (empty for the file as a whole).
	Path string
	// Reason says what is wrong.
	Reason string
}

// Error returns "rls: invalid configuration: path: reason".
func (e *FileError) Error() string {
	if e.Path == "" {
		return ErrInvalidConfig.Error() + ": " + e.Reason
	}
	return ErrInvalidConfig.Error() + ": " + e.Path + ": " + e.Reason
}

// Unwrap returns ErrInvalidConfig.
func (e *FileError) Unwrap() error { return ErrInvalidConfig }

func fileError(path, format string, args ...any) error {
	return &FileError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// Parse reads a configuration file in envoyproxy/ratelimit's YAML format,
// with this library's extra fields (see RateLimit), and checks it as
// envoyproxy/ratelimit does: an unknown field, an empty domain or key, a
// duplicate key and value at one level, a unit that is not one or one set
// beside unlimited, an empty replaces name or one naming its own limit are
// errors (a *FileError wrapping ErrInvalidConfig). It also checks the
// extension fields and the bounds a file keeps (1 MiB, 16 levels, 10,000
// descriptors).
func Parse(data []byte) (*File, error) {
	if len(data) > maxFileSize {
		return nil, fileError("", "more than the %d bytes a file may have", maxFileSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f File
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fileError("", "empty file")
		}
		return nil, fileError("", "%v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fileError("", "one document per file")
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	return &f, nil
}

// check validates f's tree as Parse says.
func (f *File) check() error {
	if f.Domain == "" {
		return fileError("", "the domain must not be empty")
	}
	count := 0
	return checkLevel(f.Domain, f.Descriptors, 1, &count)
}

func checkLevel(parent string, ds []Descriptor, depth int, count *int) error {
	if len(ds) > 0 && depth > maxDepth {
		return fileError(parent, "descriptors nested deeper than %d levels", maxDepth)
	}
	seen := make(map[string]bool, len(ds))
	for i := range ds {
		d := &ds[i]
		if *count++; *count > maxDescriptors {
			return fileError(parent, "more than %d descriptors", maxDescriptors)
		}
		if d.Key == "" {
			return fileError(parent, "descriptor %d has an empty key", i)
		}
		path := parent + "." + nodeKey(d.Key, d.Value)
		if seen[nodeKey(d.Key, d.Value)] {
			return fileError(path, "duplicate descriptor key and value")
		}
		seen[nodeKey(d.Key, d.Value)] = true
		if d.RateLimit != nil {
			if _, err := d.RateLimit.spec(path); err != nil {
				return err
			}
		}
		if err := checkLevel(path, d.Descriptors, depth+1, count); err != nil {
			return err
		}
	}
	return nil
}

// nodeKey is a node's key at its level: key_value, or key alone, as
// envoyproxy/ratelimit names them.
func nodeKey(key, value string) string {
	if value == "" {
		return key
	}
	return key + "_" + value
}

// units are the windows of RateLimit.Unit, as envoyproxy/ratelimit counts
// them, by the names of the RateLimitResponse's Unit enum.
var units = map[string]time.Duration{
	"SECOND": time.Second,
	"MINUTE": time.Minute,
	"HOUR":   time.Hour,
	"DAY":    24 * time.Hour,
	"WEEK":   7 * 24 * time.Hour,
	"MONTH":  30 * 24 * time.Hour,
	"YEAR":   365 * 24 * time.Hour,
}

var algorithms = map[string]hybrid.Limit{
	"":                       {Algorithm: hybrid.FixedWindow},
	"fixed_window":           {Algorithm: hybrid.FixedWindow},
	"sliding_window_counter": {Algorithm: hybrid.SlidingWindowCounter},
	"sub_window_counter":     {Algorithm: hybrid.SubWindowCounter},
	"token_bucket":           {Algorithm: hybrid.TokenBucket},
	"leaky_bucket":           {Algorithm: hybrid.LeakyBucket},
	"gcra":                   {Algorithm: hybrid.GCRA},
}

var modes = map[string]hybrid.Mode{"": 0, "hybrid": hybrid.Hybrid, "central": hybrid.Central, "local": hybrid.Local}

var policies = map[string]hybrid.Policy{"": 0, "gossip": hybrid.Gossip, "fail_local": hybrid.FailLocal,
	"fail_open": hybrid.FailOpen, "fail_closed": hybrid.FailClosed}

var waits = map[string]hybrid.Wait{"": 0, "in_flight": hybrid.WaitInFlight, "never": hybrid.WaitNever, "first": hybrid.WaitFirst}

// limitSpec is a RateLimit checked: what a rule is registered with.
type limitSpec struct {
	unit      string // the Unit enum's name
	window    time.Duration
	quota     int64
	unlimited bool
	limit     hybrid.Limit
	mode      hybrid.Mode
	policy    hybrid.Policy
	wait      hybrid.Wait
	global    bool
}

// spec checks r, the limit of the node at path, and returns what it
// describes.
func (r *RateLimit) spec(path string) (limitSpec, error) {
	unit := strings.ToUpper(r.Unit)
	window, known := units[unit]
	for _, rp := range r.Replaces {
		if rp.Name == "" {
			return limitSpec{}, fileError(path, "replaces has an empty name")
		}
		if rp.Name == r.Name {
			return limitSpec{}, fileError(path, "replaces names its own limit %q", rp.Name)
		}
	}
	if r.Unlimited {
		if r.Unit != "" {
			return limitSpec{}, fileError(path, "unit %q set on an unlimited limit", r.Unit)
		}
		if r.Global {
			return limitSpec{}, fileError(path, "global set on an unlimited limit")
		}
		return limitSpec{unlimited: true}, nil
	}
	if !known {
		return limitSpec{}, fileError(path, "invalid rate limit unit %q", r.Unit)
	}
	s := limitSpec{unit: unit, window: window, quota: int64(r.RequestsPerUnit)}
	lim, ok := algorithms[r.Algorithm]
	if !ok {
		return limitSpec{}, fileError(path, "unknown algorithm %q", r.Algorithm)
	}
	if s.mode, ok = modes[r.Mode]; !ok {
		return limitSpec{}, fileError(path, "unknown mode %q", r.Mode)
	}
	if s.policy, ok = policies[r.Policy]; !ok {
		return limitSpec{}, fileError(path, "unknown policy %q", r.Policy)
	}
	if s.wait, ok = waits[r.Wait]; !ok {
		return limitSpec{}, fileError(path, "unknown wait %q", r.Wait)
	}
	if s.global = r.Global; s.global && lim.Algorithm != hybrid.FixedWindow {
		return limitSpec{}, fileError(path, "global set for %s: needs fixed_window", lim.Algorithm)
	}
	if s.global && s.mode != 0 && s.mode != hybrid.Hybrid {
		return limitSpec{}, fileError(path, "global set in mode %s: needs hybrid", s.mode)
	}
	lim.Quota, lim.Window = s.quota, window
	switch lim.Algorithm {
	case hybrid.TokenBucket, hybrid.LeakyBucket, hybrid.GCRA:
		lim.Burst = r.Burst
		if lim.Burst == 0 {
			lim.Burst = s.quota
		}
	default:
		if r.Burst != 0 {
			return limitSpec{}, fileError(path, "burst set for %s, which has none", lim.Algorithm)
		}
	}
	s.limit = lim
	if s.quota == 0 {
		return s, nil // refuses everything: no rule
	}
	if err := lim.Validate(); err != nil {
		return limitSpec{}, fileError(path, "%v", err)
	}
	return s, nil
}
