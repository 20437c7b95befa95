package fallback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrInvalidConfig is wrapped by the errors New returns for a Config it
// rejects; the message names the field.
var ErrInvalidConfig = errors.New("fallback: invalid config")

// ErrClosed is returned by Join after Close.
var ErrClosed = errors.New("fallback: node closed")

// Config configures a Node. The zero value, with Keys set, is a LAN node
// named after the host on port 7946 that joins nobody until Join is
// called. New copies the Config; later changes to it have no effect.
type Config struct {
	// Memberlist is the gossip layer's configuration in memberlist's own
	// terms: node name, bind and advertise addresses and ports, probe,
	// gossip and push/pull intervals, packet size (UDPBufferSize, about
	// 1,400 bytes by default). Default: memberlist.DefaultLANConfig(). New
	// copies it and never changes the caller's value. It must leave
	// Delegate, Keyring, SecretKey, Label, Logger and LogOutput
	// unset: New sets them from this Config. Events, if set, is called
	// after the node's own membership bookkeeping. A zero DeadNodeReclaimTime
	// becomes 30s, so a node that restarts on a new address takes its name
	// back.
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
	// tried on receipt, so keys can rotate (add a key everywhere, make it
	// primary everywhere with Keyring().UseKey, then remove the old one).
	// Each key is 16, 24 or 32 bytes (AES-128, -192, -256). Required unless
	// Insecure is set: an open gossip port lets anyone forge counts.
	Keys [][]byte
	// Insecure allows a node without Keys, for tests on a trusted
	// loopback only. Default: false.
	Insecure bool
	// Label is the cluster label: a node only speaks with nodes of the
	// same label, so two clusters sharing a network (or a key) stay apart.
	// Default: "hybridlimit".
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
	// 30s.
	RecordTTL time.Duration

	// MaxKeys bounds the keys this node tracks; Observe ignores new keys
	// beyond it (counted in Stats.KeysDropped). Keys idle for RecordTTL
	// are forgotten. Default: 100,000.
	MaxKeys int
	// MaxRecords bounds the peers' records this node keeps; records beyond
	// it are dropped (Stats.RecordsDropped). Default: 1,000,000.
	MaxRecords int
	// MaxQueued bounds the records waiting to be gossiped; beyond it the
	// most-sent are dropped. Each Interval queues the hottest keys first.
	// Default: 1,024.
	MaxQueued int
	// MaxStateRecords bounds the records, hottest first, sent in one
	// push/pull state exchange. Default: 8,192.
	MaxStateRecords int
	// LeaveTimeout bounds how long Close waits for the leave message to
	// reach a peer. Default: 1s.
	LeaveTimeout time.Duration

	// Logger receives memberlist's log lines at their levels, and this
	// package's. Default: none (discarded); nothing goes to stderr.
	Logger *slog.Logger
}

const (
	defaultRejoin      = 30 * time.Second
	defaultInterval    = 200 * time.Millisecond
	defaultHalfLife    = 2 * time.Second
	defaultReserve     = 0.05
	defaultRecordTTL   = 30 * time.Second
	defaultMaxKeys     = 100_000
	defaultMaxRecords  = 1_000_000
	defaultMaxQueued   = 1024
	defaultMaxState    = 8192
	defaultLeave       = time.Second
	defaultReclaimTime = 30 * time.Second
	defaultLabel       = "hybridlimit"
)

func invalid(field string, value any, reason string) error {
	return fmt.Errorf("%w: %s %v: %s", ErrInvalidConfig, field, value, reason)
}

// withDefaults returns a copy of c with defaults filled in, and the
// memberlist config to create, a copy of c.Memberlist's.
func (c Config) withDefaults() (Config, *memberlist.Config, error) {
	var ml memberlist.Config
	if c.Memberlist != nil {
		ml = *c.Memberlist
	} else {
		ml = *memberlist.DefaultLANConfig()
	}
	switch {
	case ml.Delegate != nil:
		return c, nil, invalid("Memberlist.Delegate", "set", "New sets it")
	case ml.Keyring != nil || len(ml.SecretKey) > 0:
		return c, nil, invalid("Memberlist.Keyring", "set", "use Config.Keys")
	case ml.Label != "":
		return c, nil, invalid("Memberlist.Label", ml.Label, "use Config.Label")
	case ml.Logger != nil || ml.LogOutput != nil:
		return c, nil, invalid("Memberlist.Logger", "set", "use Config.Logger")
	case len(ml.Name) == 0 || len(ml.Name) > maxOrigin:
		return c, nil, invalid("Memberlist.Name", fmt.Sprintf("%q", ml.Name), "must be 1 to 128 bytes")
	}
	c.Seeds = append([]string(nil), c.Seeds...)
	keys := make([][]byte, len(c.Keys))
	for i, k := range c.Keys {
		switch len(k) {
		case 16, 24, 32:
		default:
			return c, nil, invalid(fmt.Sprintf("Keys[%d]", i), fmt.Sprintf("(%d bytes)", len(k)), "must be 16, 24 or 32 bytes")
		}
		keys[i] = bytes.Clone(k)
	}
	c.Keys = keys
	if len(c.Keys) == 0 && !c.Insecure {
		return c, nil, invalid("Keys", "(none)", "required unless Insecure is set")
	}
	if c.Label == "" {
		c.Label = defaultLabel
	}
	if len(c.Label) > 255 {
		return c, nil, invalid("Label", fmt.Sprintf("(%d bytes)", len(c.Label)), "must be at most 255 bytes")
	}
	err := errors.Join(
		orDefault("RejoinInterval", &c.RejoinInterval, defaultRejoin),
		orDefault("Interval", &c.Interval, defaultInterval),
		orDefault("DemandHalfLife", &c.DemandHalfLife, defaultHalfLife),
		orDefault("RecordTTL", &c.RecordTTL, defaultRecordTTL),
		orDefault("LeaveTimeout", &c.LeaveTimeout, defaultLeave),
		orDefault("MaxKeys", &c.MaxKeys, defaultMaxKeys),
		orDefault("MaxRecords", &c.MaxRecords, defaultMaxRecords),
		orDefault("MaxQueued", &c.MaxQueued, defaultMaxQueued),
		orDefault("MaxStateRecords", &c.MaxStateRecords, defaultMaxState),
	)
	if err != nil {
		return c, nil, err
	}
	if c.RecordTTL < 3*c.Interval {
		return c, nil, invalid("RecordTTL", c.RecordTTL, "must be at least 3 × Interval")
	}
	if c.Reserve == 0 {
		c.Reserve = defaultReserve
	}
	if !(c.Reserve > 0 && c.Reserve <= 0.5) {
		return c, nil, invalid("Reserve", c.Reserve, "must be in (0, 0.5]")
	}
	if ml.DeadNodeReclaimTime == 0 {
		ml.DeadNodeReclaimTime = defaultReclaimTime
	}
	if len(c.Keys) > 0 {
		kr, err := memberlist.NewKeyring(c.Keys, c.Keys[0])
		if err != nil {
			return c, nil, fmt.Errorf("%w: Keys: %w", ErrInvalidConfig, err)
		}
		ml.Keyring = kr
		ml.GossipVerifyIncoming = true
		ml.GossipVerifyOutgoing = true
	}
	ml.Label = c.Label
	ml.Logger = log.New(&slogWriter{l: c.Logger}, "", 0)
	return c, &ml, nil
}

// orDefault sets *v to def when it is zero, and rejects a negative *v.
func orDefault[T int | time.Duration](field string, v *T, def T) error {
	switch {
	case *v < 0:
		return invalid(field, *v, "must not be negative")
	case *v == 0:
		*v = def
	}
	return nil
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
