package syncer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/syncer"
)

// TestSyncConfigValidate: Epsilon and Batch take their defaults at 0, and a
// bad value is an error wrapping ErrInvalidConfig that names the field and
// the range it must be in.
func TestSyncConfigValidate(t *testing.T) {
	for _, c := range []syncer.SyncConfig{{}, {Epsilon: 1}, {Batch: 1}} {
		assert.NoError(t, c.Validate(), "%+v", c)
	}
	tests := []struct {
		name string
		cfg  syncer.SyncConfig
		want string
	}{
		{"negative Epsilon", syncer.SyncConfig{Epsilon: -0.1}, "Epsilon -0.1: must be in [0, 1] (0 takes the default)"},
		{"Epsilon above 1", syncer.SyncConfig{Epsilon: 1.5}, "Epsilon 1.5: must be in [0, 1] (0 takes the default)"},
		{"negative Batch", syncer.SyncConfig{Batch: -1}, "Batch -1: must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			assert.ErrorIs(t, err, syncer.ErrInvalidConfig)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}
