package keyname_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/keyname"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// TestSyncerAgrees holds syncer, which documents the prefix and the
// longest rule name as constants of its own, to what keyname says.
func TestSyncerAgrees(t *testing.T) {
	lim := local.MustLimit(local.Params{Algorithm: local.FixedWindow, Limit: 1, Window: time.Second})
	r, err := syncer.NewRule(strings.Repeat("a", keyname.MaxRule), lim)
	require.NoError(t, err, "a name of MaxRule bytes")
	_, err = syncer.NewRule(strings.Repeat("a", keyname.MaxRule+1), lim)
	assert.ErrorIs(t, err, syncer.ErrInvalidRule, "a name past MaxRule")
	var ks syncer.Keyspace
	state, _ := ks.Keys(r, "k")
	assert.True(t, strings.HasPrefix(state, keyname.DefaultPrefix+":"), "%q: the default prefix", state)
}
