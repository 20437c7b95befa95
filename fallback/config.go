package fallback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/hybridlimit/hybridlimit/internal/config"
)

// ErrInvalidConfig is wrapped by the error hybrid.New returns for a
// Config.Gossip it rejects (with hybrid.ErrInvalidConfig); the message
// names the field.
var ErrInvalidConfig = errors.New("fallback: invalid config")

// errClosed is returned by a node's Join after Close.
var errClosed = errors.New("fallback: node closed")

// Config configures the gossip node a hybrid.Limiter runs: users set it as
// hybrid.Config.Gossip, a *hybrid.GossipConfig. Every zero field takes the
// default it documents (docs/operating.md#defaults lists them all); the
// zero value, with Keys set, is a LAN node named after the host on port
// 7946 that joins nobody (set Seeds). hybrid.New copies the Config; later
// changes to it have no effect.
type Config struct {
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
	// beyond it (counted in hybrid.Stats.GossipKeysDropped). Keys idle for RecordTTL
	// are forgotten. Default: 100,000.
	MaxKeys int
	// MaxRecords bounds the peers' records this node keeps; records beyond
	// it are dropped (hybrid.Stats.GossipRecordsDropped). Default: 1,000,000.
	MaxRecords int
	// MaxQueued bounds the records waiting to be gossiped; beyond it the
	// most-sent are dropped. Each Interval queues the hottest keys first.
	// Default: 1,024.
	MaxQueued int
	// MaxStateRecords bounds the records, hottest first, sent in one
	// push/pull state exchange. Default: 8,192.
	MaxStateRecords int
	// LeaveTimeout bounds how long the Limiter's Shutdown (or Close) waits
	// for the node's leave message to reach a peer. Default: 1s.
	LeaveTimeout time.Duration

	// Logger receives memberlist's log lines at their levels, and this
	// package's. Default: none (discarded); nothing goes to stderr.
	Logger *slog.Logger
}

// Defaults of Config: docs/operating.md#defaults lists them, and
// TestDefaults holds that table against them.
const (
	defaultRejoinInterval      = 30 * time.Second
	defaultInterval            = 200 * time.Millisecond
	defaultDemandHalfLife      = 2 * time.Second
	defaultReserve             = 0.05
	defaultRecordTTL           = 30 * time.Second
	defaultMaxKeys             = 100_000
	defaultMaxRecords          = 1_000_000
	defaultMaxQueued           = 1024
	defaultMaxStateRecords     = 8192
	defaultLeaveTimeout        = time.Second
	defaultDeadNodeReclaimTime = 30 * time.Second
	defaultLabel               = "hybridlimit"
)

// Bounds of Config.
const (
	maxLabel   = 255 // bytes of Label
	maxReserve = 0.5 // Reserve
	// minRecordTTLIntervals bounds RecordTTL from below, in Intervals: a
	// busy key's record is sent every RecordTTL/3.
	minRecordTTLIntervals = 3
)

// invalid is the error of a bad Config field.
func invalid(field string, value any, reason string) error {
	return config.Invalid(ErrInvalidConfig, field, value, reason)
}

// withDefaults returns c with each zero field that has a default set to it.
// Its Memberlist is a copy, of the caller's or of
// memberlist.DefaultLANConfig(), with DeadNodeReclaimTime defaulted.
func (c Config) withDefaults() Config {
	var ml memberlist.Config
	if c.Memberlist != nil {
		ml = *c.Memberlist
	} else {
		ml = *memberlist.DefaultLANConfig()
	}
	if ml.DeadNodeReclaimTime == 0 {
		ml.DeadNodeReclaimTime = defaultDeadNodeReclaimTime
	}
	c.Memberlist = &ml
	if c.Label == "" {
		c.Label = defaultLabel
	}
	orDefault(&c.RejoinInterval, defaultRejoinInterval)
	orDefault(&c.Interval, defaultInterval)
	orDefault(&c.DemandHalfLife, defaultDemandHalfLife)
	orDefault(&c.RecordTTL, defaultRecordTTL)
	orDefault(&c.LeaveTimeout, defaultLeaveTimeout)
	orDefault(&c.MaxKeys, defaultMaxKeys)
	orDefault(&c.MaxRecords, defaultMaxRecords)
	orDefault(&c.MaxQueued, defaultMaxQueued)
	orDefault(&c.MaxStateRecords, defaultMaxStateRecords)
	orDefault(&c.Reserve, defaultReserve)
	return c
}

// orDefault sets *v to def when it is zero.
func orDefault[T int | float64 | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// validate reports c's first bad field, c having its defaults, in an error
// wrapping ErrInvalidConfig that names it. It builds nothing: startNode
// makes the keyring and memberlist's configuration.
func (c Config) validate() error {
	ml := c.Memberlist
	switch {
	case ml.Delegate != nil:
		return invalid("Memberlist.Delegate", "set", "the node sets it")
	case ml.Keyring != nil || len(ml.SecretKey) > 0:
		return invalid("Memberlist.Keyring", "set", "use Config.Keys")
	case ml.Label != "":
		return invalid("Memberlist.Label", fmt.Sprintf("%q", ml.Label), "use Config.Label")
	case ml.Logger != nil || ml.LogOutput != nil:
		return invalid("Memberlist.Logger", "set", "use Config.Logger")
	case len(ml.Name) == 0 || len(ml.Name) > maxOrigin:
		return invalid("Memberlist.Name", fmt.Sprintf("%q", ml.Name), fmt.Sprintf("must be 1 to %d bytes", maxOrigin))
	}
	for i, k := range c.Keys {
		switch len(k) {
		case 16, 24, 32:
		default:
			return invalid(fmt.Sprintf("Keys[%d]", i), fmt.Sprintf("(%d bytes)", len(k)), "must be 16, 24 or 32 bytes")
		}
	}
	if len(c.Keys) == 0 && !c.Insecure {
		return invalid("Keys", "(none)", "required unless Insecure is set")
	}
	if len(c.Label) > maxLabel {
		return invalid("Label", fmt.Sprintf("(%d bytes)", len(c.Label)), fmt.Sprintf("must be at most %d bytes", maxLabel))
	}
	for _, f := range []struct {
		name string
		v    int64
		show any
	}{
		{"RejoinInterval", int64(c.RejoinInterval), c.RejoinInterval},
		{"Interval", int64(c.Interval), c.Interval},
		{"DemandHalfLife", int64(c.DemandHalfLife), c.DemandHalfLife},
		{"RecordTTL", int64(c.RecordTTL), c.RecordTTL},
		{"LeaveTimeout", int64(c.LeaveTimeout), c.LeaveTimeout},
		{"MaxKeys", int64(c.MaxKeys), c.MaxKeys},
		{"MaxRecords", int64(c.MaxRecords), c.MaxRecords},
		{"MaxQueued", int64(c.MaxQueued), c.MaxQueued},
		{"MaxStateRecords", int64(c.MaxStateRecords), c.MaxStateRecords},
	} {
		if f.v < 0 {
			return invalid(f.name, f.show, "must not be negative")
		}
	}
	if c.RecordTTL < minRecordTTLIntervals*c.Interval {
		return invalid("RecordTTL", c.RecordTTL, fmt.Sprintf("must be at least %d × Interval", minRecordTTLIntervals))
	}
	if !(c.Reserve > 0 && c.Reserve <= maxReserve) {
		return invalid("Reserve", c.Reserve, fmt.Sprintf("must be in (0, %v]", maxReserve))
	}
	return nil
}

// clone returns c with its own copies of the slices the caller could
// change after the node starts: Seeds and Keys.
func (c Config) clone() Config {
	c.Seeds = slices.Clone(c.Seeds)
	keys := make([][]byte, len(c.Keys))
	for i, k := range c.Keys {
		keys[i] = bytes.Clone(k)
	}
	c.Keys = keys
	return c
}

// memberlistConfig returns the configuration memberlist.Create takes: c's
// Memberlist (withDefaults' copy) with the keyring, the label and the logger
// set from c. c is valid.
func (c Config) memberlistConfig() (*memberlist.Config, error) {
	ml := c.Memberlist
	if len(c.Keys) > 0 {
		kr, err := memberlist.NewKeyring(c.Keys, c.Keys[0])
		if err != nil {
			return nil, fmt.Errorf("%w: Keys: %w", ErrInvalidConfig, err)
		}
		ml.Keyring = kr
		ml.GossipVerifyIncoming = true
		ml.GossipVerifyOutgoing = true
	}
	ml.Label = c.Label
	ml.Logger = log.New(&slogWriter{l: c.Logger}, "", 0)
	return ml, nil
}

// slogWriter turns memberlist's log lines ("[WARN] memberlist: ...") into
// records of a slog.Logger at the matching level, or drops them.
type slogWriter struct{ l *slog.Logger }

func (w *slogWriter) Write(p []byte) (int, error) {
	if w.l == nil {
		return len(p), nil
	}
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, lv := range []struct {
		tag   string
		level slog.Level
	}{{"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}, {"[ERROR]", slog.LevelError}} {
		if i := bytes.Index(line, []byte(lv.tag)); i >= 0 {
			level = lv.level
			line = bytes.TrimSpace(line[i+len(lv.tag):])
			break
		}
	}
	w.l.Log(context.Background(), level, string(line), "component", "memberlist")
	return len(p), nil
}

var _ io.Writer = (*slogWriter)(nil)
