package fallback

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/doctable"
	"github.com/hybridlimit/hybridlimit/internal/gossiphook"
)

func TestConfigRejects(t *testing.T) {
	tests := []struct {
		field string
		edit  func(*config)
	}{
		{"Keys", func(c *config) { c.Keys = nil }},
		{"Keys[1]", func(c *config) { c.Keys = [][]byte{testKey, []byte("short")} }},
		{"Memberlist.Delegate", func(c *config) { c.Memberlist.Delegate = delegate{} }},
		{"Memberlist.Keyring", func(c *config) { c.Memberlist.SecretKey = testKey }},
		{"Memberlist.Label", func(c *config) { c.Memberlist.Label = "x" }},
		{"Memberlist.Logger", func(c *config) { c.Memberlist.LogOutput = &logLines{} }},
		{"Memberlist.Name", func(c *config) { c.Memberlist.Name = "" }},
		{"Label", func(c *config) { c.Label = string(make([]byte, 256)) }},
		{"Interval", func(c *config) { c.Interval = -time.Second }},
		{"RecordTTL", func(c *config) { c.RecordTTL = c.Interval }},
		{"MaxQueued", func(c *config) { c.MaxQueued = -1 }},
		{"Reserve", func(c *config) { c.Reserve = 0.7 }},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			cfg := testConfig("x")
			tt.edit(&cfg)
			_, err := startNode(cfg)
			require.ErrorIs(t, err, gossiphook.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.field+" ")
		})
	}
}

// TestDefaults holds docs/operating.md's rows for package fallback against
// the constants and against what withDefaults fills in.
func TestDefaults(t *testing.T) {
	c := config{}.withDefaults()
	def := func(field, constant string, value, got any) doctable.Default {
		return doctable.Default{Config: "GossipConfig", Field: field, Const: constant, Value: value, Got: got}
	}
	doctable.Check(t, doctable.Package{
		Name: "fallback",
		Defaults: []doctable.Default{
			{Config: "GossipConfig", Field: "Memberlist", Doc: "a copy of memberlist.DefaultLANConfig()", Got: c.Memberlist},
			def("Memberlist.DeadNodeReclaimTime", "defaultDeadNodeReclaimTime", defaultDeadNodeReclaimTime, c.Memberlist.DeadNodeReclaimTime),
			def("RejoinInterval", "defaultRejoinInterval", defaultRejoinInterval, c.RejoinInterval),
			def("Label", "defaultLabel", defaultLabel, c.Label),
			def("Interval", "defaultInterval", defaultInterval, c.Interval),
			def("DemandHalfLife", "defaultDemandHalfLife", defaultDemandHalfLife, c.DemandHalfLife),
			def("Reserve", "defaultReserve", defaultReserve, c.Reserve),
			def("RecordTTL", "defaultRecordTTL", defaultRecordTTL, c.RecordTTL),
			def("MaxKeys", "defaultMaxKeys", defaultMaxKeys, c.MaxKeys),
			def("MaxRecords", "defaultMaxRecords", defaultMaxRecords, c.MaxRecords),
			def("MaxQueued", "defaultMaxQueued", defaultMaxQueued, c.MaxQueued),
			def("MaxStateRecords", "defaultMaxStateRecords", defaultMaxStateRecords, c.MaxStateRecords),
			def("LeaveTimeout", "defaultLeaveTimeout", defaultLeaveTimeout, c.LeaveTimeout),
		},
		Bounds: []doctable.Bound{
			{What: "GossipConfig.Label", Const: "maxLabel", Value: maxLabel, Doc: "255 bytes"},
			{What: "GossipConfig.Reserve", Const: "maxReserve", Value: maxReserve, Doc: "0.5"},
			{What: "GossipConfig.RecordTTL, at least", Const: "minRecordTTLIntervals", Value: minRecordTTLIntervals, Doc: "3 × Interval"},
			{What: "GossipConfig.Memberlist.Name", Const: "maxOrigin", Value: maxOrigin, Doc: "128 bytes"},
		},
		Filled: []doctable.Filled{{Config: "GossipConfig", Zero: config{}, With: c}},
	})
	assert.Equal(t, memberlist.DefaultLANConfig().BindPort, c.Memberlist.BindPort, "LAN defaults")
}

// TestConfigDefaultsAndCopies: withDefaults fills a copy of the caller's
// memberlist configuration and changes no field that is set; a node keeps its
// own copies of what the caller could change.
func TestConfigDefaultsAndCopies(t *testing.T) {
	ml := fastMemberlist("x")
	before := *ml
	key := bytes.Clone(testKey)
	cfg := config{Memberlist: ml, Keys: [][]byte{key}}
	c := cfg.withDefaults()
	assert.Equal(t, before, *ml, "the caller's memberlist config is unchanged")
	require.NotSame(t, ml, c.Memberlist)
	assert.Equal(t, defaultDeadNodeReclaimTime, c.Memberlist.DeadNodeReclaimTime)
	assert.Equal(t, defaultLabel, c.Label)
	assert.Equal(t, defaultInterval, c.Interval)
	assert.Equal(t, defaultReserve, c.Reserve)
	assert.Equal(t, defaultMaxQueued, c.MaxQueued)
	require.NoError(t, c.validate())
	got, err := c.memberlistConfig()
	require.NoError(t, err)
	assert.Nil(t, ml.Keyring, "the caller's memberlist config is unchanged")
	assert.Equal(t, defaultLabel, got.Label)
	require.NotNil(t, got.Keyring)
	assert.Equal(t, testKey, got.Keyring.GetPrimaryKey())

	set := config{
		Memberlist: c.Memberlist, Seeds: []string{"a:1"}, RejoinInterval: time.Second, Keys: [][]byte{testKey},
		Label: "l", Interval: time.Second, DemandHalfLife: time.Second, Reserve: 0.5, RecordTTL: 3 * time.Second,
		MaxKeys: 1, MaxRecords: 1, MaxQueued: 1, MaxStateRecords: 1, LeaveTimeout: time.Second,
	}
	again := set.withDefaults()
	assert.Equal(t, *set.Memberlist, *again.Memberlist)
	again.Memberlist = set.Memberlist
	assert.Equal(t, set, again, "withDefaults changed a field that was set")

	c = cfg.clone()
	key[0] ^= 1
	assert.Equal(t, testKey, c.Keys[0], "the node keeps its own copy of the keys")

	require.NoError(t, config{Insecure: true}.withDefaults().validate())
	got, err = config{Insecure: true}.withDefaults().memberlistConfig()
	require.NoError(t, err)
	assert.Nil(t, got.Keyring)
}

// TestConfigErrors: the errors name the field and its value in the
// package's form.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  config
		want string
	}{
		{config{}, "fallback: invalid config: Keys (none): required unless Insecure is set"},
		{config{Insecure: true, Interval: -time.Second}, "fallback: invalid config: Interval -1s: must not be negative"},
		{config{Insecure: true, MaxKeys: -1}, "fallback: invalid config: MaxKeys -1: must not be negative"},
		{config{Insecure: true, Reserve: 0.7}, "fallback: invalid config: Reserve 0.7: must be in (0, 0.5]"},
		{config{Insecure: true, RecordTTL: time.Second, Interval: time.Second}, "fallback: invalid config: RecordTTL 1s: must be at least 3 × Interval"},
		{config{Insecure: true, Label: string(make([]byte, 256))}, "fallback: invalid config: Label (256 bytes): must be at most 255 bytes"},
	} {
		err := tc.cfg.withDefaults().validate()
		assert.ErrorIs(t, err, gossiphook.ErrInvalidConfig)
		assert.EqualError(t, err, tc.want)
	}
}

func TestStartNodeStartsAndCloses(t *testing.T) {
	cfg := testConfig("solo")
	n, err := startNode(cfg)
	require.NoError(t, err)
	assert.Equal(t, 0, cfg.Memberlist.BindPort, "the caller's port stays 0")
	assert.NotEqual(t, "127.0.0.1:0", n.Addr())
	assert.Equal(t, "solo", n.Name())
	assert.NotNil(t, n.Keyring())
	require.NoError(t, n.Close())
}
