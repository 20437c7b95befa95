package httplimit

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/hybridlimit/hybridlimit/internal/dirwatch"
)

// rulesFormat is the rules document's format version, its top-level
// "version" field. ParseRules accepts this version only.
const rulesFormat = 1

// Bounds on a rules document (docs/operating.md#bounds), so that one from a
// broken or hostile source (a file anyone can write, a Redis others can
// reach) costs little to refuse. ParseRules and the watchers refuse a
// document past one; the watchers check maxRulesSize before reading it.
const (
	// maxRulesSize is the most bytes a rules document may have. 512 KiB
	// holds maxRules rules as docs/rules.md writes them (about 130 bytes
	// each) and maxOverrides overrides, with room for comments; and it
	// bounds the densest YAML, whose parser builds a node of about 160
	// bytes for every two bytes of input before anything can be checked.
	maxRulesSize = 512 << 10
	// maxRules is the most rules a document may hold. The middleware
	// matches every request against each rule, so a set this large already
	// costs microseconds a request.
	maxRules = 2048
	// maxOverrides is the most overrides a document may hold, its rules'
	// together; each is a rule of the Limiter. Many single keys belong in
	// tiers (Config.Tiers, Config.TierFunc).
	maxOverrides = 8192
	// maxFieldSize is the most bytes of a string value (key, endpoint,
	// algorithm, window, tier, mode, policy) or an override's name; an id
	// has at most 128 (a rule name).
	maxFieldSize = 1024
)

// WatchConfig configures WatchFile and WatchRedis. The zero value is ready
// to use: every field documents its default, and docs/operating.md#defaults
// lists them all.
type WatchConfig struct {
	// PollInterval is how often the source is read whatever the
	// notifications say: the backstop for a lost file event or Redis
	// message. Default 2s for a file, 1s for Redis (one HMGET per node).
	PollInterval time.Duration
	// Debounce is how long a file must stay quiet after an event before it
	// is read, so an editor's several writes make one reload. Default
	// 100ms. WatchRedis ignores it: a published version is whole.
	Debounce time.Duration
	// Logger receives a line per reload and per rejected version. Default
	// slog.Default().
	Logger *slog.Logger
	// MeterProvider provides the reload counter
	// (hybridlimit.http.rules.reloads). Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// Defaults of WatchConfig: docs/operating.md#defaults lists them, and
// TestDefaults holds that table against them.
const (
	defaultFilePollInterval  = 2 * time.Second // WatchFile's
	defaultRedisPollInterval = time.Second     // WatchRedis's
	defaultDebounce          = 100 * time.Millisecond
)

// withDefaults returns c with each zero field that has a default set to
// it, poll being the source's default PollInterval.
func (c WatchConfig) withDefaults(poll time.Duration) WatchConfig {
	if c.PollInterval == 0 {
		c.PollInterval = poll
	}
	if c.Debounce == 0 {
		c.Debounce = defaultDebounce
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	return c
}

// validate reports c's first bad field, c having its defaults, in an error
// wrapping ErrInvalidConfig that names it. It builds nothing.
func (c WatchConfig) validate() error {
	switch {
	case c.PollInterval < 0:
		return configError("PollInterval", c.PollInterval, "must not be negative")
	case c.Debounce < 0:
		return configError("Debounce", c.Debounce, "must not be negative")
	}
	return nil
}

// Watcher applies the versions of a rules source, a file (WatchFile) or
// Redis (WatchRedis), as they change, until Close is called or the context
// given to it ends. Its methods are safe for concurrent use.
type Watcher struct {
	cfg     WatchConfig
	log     *slog.Logger
	reloads metric.Int64Counter
	source  attribute.KeyValue
	apply   func([]Rule) error

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// newWatcher validates the arguments both watchers share and returns a
// Watcher of source, which Watch… starts; poll is the source's default
// PollInterval.
func newWatcher(cfg WatchConfig, source string, poll time.Duration, apply func([]Rule) error) (*Watcher, error) {
	if apply == nil {
		return nil, fmt.Errorf("%w: apply: required", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults(poll)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	reloads, err := cfg.MeterProvider.Meter(meterName).Int64Counter("hybridlimit.http.rules.reloads",
		metric.WithDescription("Rules versions read from a file or Redis, by source and result (applied or rejected)."),
		metric.WithUnit("{version}"))
	if err != nil {
		return nil, fmt.Errorf("%w: MeterProvider: %w", ErrInvalidConfig, err)
	}
	return &Watcher{
		cfg: cfg, reloads: reloads, source: attribute.String("source", source),
		log: cfg.Logger.With("source", source), apply: apply,
	}, nil
}

var (
	resultApplied  = attribute.String("result", "applied")
	resultRejected = attribute.String("result", "rejected")
)

// load parses data and hands the rules to apply. A bad version is logged
// and counted, and apply is not called: the previous rules keep serving.
func (w *Watcher) load(ctx context.Context, data []byte, version string) error {
	rules, err := ParseRules(data)
	if err == nil {
		err = w.apply(rules)
	}
	if err != nil {
		return w.reject(ctx, version, err)
	}
	w.reloads.Add(ctx, 1, metric.WithAttributes(w.source, resultApplied))
	w.log.Info("httplimit: rules applied", "version", version, "rules", len(rules))
	return nil
}

// reject logs and counts a version that is not applied, and returns err.
func (w *Watcher) reject(ctx context.Context, version string, err error) error {
	w.reloads.Add(ctx, 1, metric.WithAttributes(w.source, resultRejected))
	w.log.Error("httplimit: rules rejected; the previous rules keep serving", "version", version, "error", err)
	return err
}

// readRules reads the rules file at path, refusing it, unread, when it
// is larger than maxRulesSize: the error is then a *RuleError.
func readRules(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxRulesSize {
		return nil, tooLarge(fi.Size())
	}
	// The file may grow after Stat: read one byte past the bound, no more.
	data, err := io.ReadAll(io.LimitReader(f, maxRulesSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxRulesSize {
		return nil, docError("", fmt.Sprintf("more than the %d bytes a document may have", maxRulesSize))
	}
	return data, nil
}

// fileSource is a watched rules file.
type fileSource struct {
	w    *Watcher
	path string

	last    [sha256.Size]byte // the content last read, applied or rejected
	lastErr string            // why the file could not be read, or was too large, at the last check
}

// WatchFile reads the rules file at path, hands its rules to apply, and
// then applies each new version of the file until ctx ends or Close is
// called.
//
// It watches the file's directory, not the file, so it sees editors that
// save by renaming a new file over the old one and Kubernetes volumes that
// swap a "..data" symlink. Events are debounced; the file is also read
// every PollInterval, in case an event is lost, and it is applied only when
// its content changed. A version that does not parse, or that apply
// refuses, is logged and counted (hybridlimit.http.rules.reloads with
// result=rejected), and the previous rules keep serving; so is a file
// larger than a rules document may be (512 KiB), which is not read.
//
// The first version must be valid: WatchFile returns its error, having
// started nothing. apply is called from one goroutine at a time.
func WatchFile(ctx context.Context, path string, apply func([]Rule) error, cfg WatchConfig) (*Watcher, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: path: required", ErrInvalidConfig)
	}
	w, err := newWatcher(cfg, "file", defaultFilePollInterval, apply)
	if err != nil {
		return nil, err
	}
	s := &fileSource{w: w, path: path}
	data, err := readRules(path)
	var re *RuleError
	if errors.As(err, &re) {
		return nil, w.reject(ctx, "unread", err)
	}
	if err != nil {
		return nil, err
	}
	s.last = sha256.Sum256(data)
	if err := w.load(ctx, data, hashVersion(s.last)); err != nil {
		return nil, err
	}
	dw, err := dirwatch.New(filepath.Dir(path))
	if err != nil {
		// Polling still reloads, only later.
		w.log.Warn("httplimit: cannot watch the rules file's directory; polling only", "path", path, "error", err)
	}
	ctx, w.stop = context.WithCancel(ctx)
	w.wg.Go(func() {
		dw.Run(ctx, s.w.cfg.PollInterval, s.w.cfg.Debounce, func() { s.check(ctx) }, func(err error) {
			s.w.log.Warn("httplimit: watching the rules file", "path", s.path, "error", err)
		})
	})
	return w, nil
}

func hashVersion(h [sha256.Size]byte) string { return fmt.Sprintf("sha256:%x", h[:8]) }

// check reads the file and loads it if its content changed.
func (s *fileSource) check(ctx context.Context) {
	data, err := readRules(s.path)
	var re *RuleError
	if errors.As(err, &re) {
		// Too large to read: rejected once per size, not per poll.
		if err.Error() != s.lastErr {
			s.lastErr = err.Error()
			s.w.reject(ctx, "unread", err)
		}
		return
	}
	if err != nil {
		// Counted once per failure, not per poll.
		if err.Error() != s.lastErr {
			s.lastErr = err.Error()
			s.w.reloads.Add(ctx, 1, metric.WithAttributes(s.w.source, resultRejected))
			s.w.log.Error("httplimit: rules file unreadable; the previous rules keep serving", "path", s.path, "error", err)
		}
		return
	}
	s.lastErr = ""
	h := sha256.Sum256(data)
	if h == s.last {
		return
	}
	s.last = h
	s.w.load(ctx, data, hashVersion(h))
}

// Close stops watching and waits for the watcher's goroutines to end. A
// Redis watcher closes its subscription, not the client. Close is
// idempotent.
func (w *Watcher) Close() error {
	if w.stop != nil {
		w.stop()
	}
	w.wg.Wait()
	return nil
}
