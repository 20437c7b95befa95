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

	cfgpkg "github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/gossiphook"
)

// errClosed is returned by a node's Join after Close.
var errClosed = errors.New("fallback: node closed")

// config is hybrid.GossipConfig as this package works on it:
// gossiphook.Config, which hybrid converts its GossipConfig to.
type config gossiphook.Config

// Defaults of a config: docs/operating.md#defaults lists them, and
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

// Bounds of a config.
const (
	maxLabel   = 255 // bytes of Label
	maxReserve = 0.5 // Reserve
	// minRecordTTLIntervals bounds RecordTTL from below, in Intervals: a
	// busy key's record is sent every RecordTTL/3.
	minRecordTTLIntervals = 3
)

// invalid is the error of a bad field of a config.
func invalid(field string, value any, reason string) error {
	return cfgpkg.Invalid(gossiphook.ErrInvalidConfig, field, value, reason)
}

// withDefaults returns c with each zero field that has a default set to it.
// Its Memberlist is a copy, of the caller's or of
// memberlist.DefaultLANConfig(), with DeadNodeReclaimTime defaulted.
func (c config) withDefaults() config {
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
// wrapping gossiphook.ErrInvalidConfig that names it. It builds nothing: startNode
// makes the keyring and memberlist's configuration.
func (c config) validate() error {
	ml := c.Memberlist
	switch {
	case ml.Delegate != nil:
		return invalid("Memberlist.Delegate", "set", "the node sets it")
	case ml.Keyring != nil || len(ml.SecretKey) > 0:
		return invalid("Memberlist.Keyring", "set", "use GossipConfig.Keys")
	case ml.Label != "":
		return invalid("Memberlist.Label", fmt.Sprintf("%q", ml.Label), "use GossipConfig.Label")
	case ml.Logger != nil || ml.LogOutput != nil:
		return invalid("Memberlist.Logger", "set", "use GossipConfig.Logger")
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
func (c config) clone() config {
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
func (c config) memberlistConfig() (*memberlist.Config, error) {
	ml := c.Memberlist
	if len(c.Keys) > 0 {
		kr, err := memberlist.NewKeyring(c.Keys, c.Keys[0])
		if err != nil {
			return nil, fmt.Errorf("%w: Keys: %w", gossiphook.ErrInvalidConfig, err)
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
