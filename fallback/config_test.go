package fallback

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigRejects(t *testing.T) {
	tests := []struct {
		field string
		edit  func(*Config)
	}{
		{"Keys", func(c *Config) { c.Keys = nil }},
		{"Keys[1]", func(c *Config) { c.Keys = [][]byte{testKey, []byte("short")} }},
		{"Memberlist.Delegate", func(c *Config) { c.Memberlist.Delegate = delegate{} }},
		{"Memberlist.Keyring", func(c *Config) { c.Memberlist.SecretKey = testKey }},
		{"Memberlist.Label", func(c *Config) { c.Memberlist.Label = "x" }},
		{"Memberlist.Logger", func(c *Config) { c.Memberlist.LogOutput = &logLines{} }},
		{"Memberlist.Name", func(c *Config) { c.Memberlist.Name = "" }},
		{"Label", func(c *Config) { c.Label = string(make([]byte, 256)) }},
		{"Interval", func(c *Config) { c.Interval = -time.Second }},
		{"RecordTTL", func(c *Config) { c.RecordTTL = c.Interval }},
		{"MaxQueued", func(c *Config) { c.MaxQueued = -1 }},
		{"Reserve", func(c *Config) { c.Reserve = 0.7 }},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			cfg := testConfig("x")
			tt.edit(&cfg)
			_, err := New(cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.field+" ")
		})
	}
}

func TestConfigDefaultsAndCopies(t *testing.T) {
	ml := fastMemberlist("x")
	before := *ml
	key := bytes.Clone(testKey)
	cfg := Config{Memberlist: ml, Keys: [][]byte{key}}
	c, got, err := cfg.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, before, *ml, "the caller's memberlist config is unchanged")
	assert.Nil(t, cfg.Memberlist.Keyring)
	assert.Equal(t, defaultLabel, got.Label)
	assert.Equal(t, defaultReclaimTime, got.DeadNodeReclaimTime)
	require.NotNil(t, got.Keyring)
	assert.Equal(t, testKey, got.Keyring.GetPrimaryKey())
	assert.Equal(t, defaultInterval, c.Interval)
	assert.Equal(t, defaultReserve, c.Reserve)
	assert.Equal(t, defaultMaxQueued, c.MaxQueued)

	key[0] ^= 1
	assert.Equal(t, testKey, c.Keys[0], "New keeps its own copy of the keys")

	def, got, err := Config{Keys: [][]byte{testKey}}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, memberlist.DefaultLANConfig().BindPort, got.BindPort, "LAN defaults")
	assert.Equal(t, defaultRecordTTL, def.RecordTTL)

	_, got, err = Config{Insecure: true}.withDefaults()
	require.NoError(t, err)
	assert.Nil(t, got.Keyring)
}

func TestNewStartsAndCloses(t *testing.T) {
	cfg := testConfig("solo")
	n, err := New(cfg)
	require.NoError(t, err)
	assert.Equal(t, 0, cfg.Memberlist.BindPort, "the caller's port stays 0")
	assert.NotEqual(t, "127.0.0.1:0", n.Addr())
	assert.Equal(t, "solo", n.Name())
	assert.NotNil(t, n.Keyring())
	require.NoError(t, n.Close())
}
