package local

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/doctable"
)

// TestDefaults holds docs/operating.md's rows for package local against
// the constants and against what withDefaults and compile fill in.
func TestDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	subw := mustCompile(Limit{Algorithm: SubWindowCounter, Quota: 100, Window: time.Minute})
	bucket := mustCompile(Limit{Algorithm: TokenBucket, Quota: 100, Window: time.Minute})
	doctable.Check(t, doctable.Package{
		Name: "local",
		Defaults: []doctable.Default{
			{Config: "Config", Field: "Shards", Const: "defaultShards", Value: defaultShards, Got: c.Shards},
			{Config: "Config", Field: "MaxKeys", Const: "defaultMaxKeys", Value: defaultMaxKeys, Got: c.MaxKeys},
			{Config: "Config", Field: "SweepInterval", Const: "defaultSweepInterval", Value: defaultSweepInterval, Got: c.SweepInterval},
			{Config: "Config", Field: "Clock", Const: "defaultResolution", Value: defaultResolution, Doc: "a coarse clock of 1ms that New starts and Close stops", Got: c.Clock, Built: true},
			{Config: "Limit", Field: "SubWindows", Const: "defaultSubWindows", Value: defaultSubWindows, Got: subw.p.SubWindows},
			{Config: "Limit", Field: "Burst", Doc: "Quota (the bucket algorithms)", Got: bucket.p.Burst},
		},
		Bounds: []doctable.Bound{
			{What: "Config.Shards", Const: "maxShards", Value: maxShards, Doc: "65,536, a power of two"},
			{What: "Limit.Window", Const: "maxWindow", Value: maxWindow, Doc: "366 days"},
			{What: "Limit.Quota of a sliding window log", Const: "maxLogLimit", Value: maxLogLimit, Doc: "65,536"},
			{What: "Limit.SubWindows", Const: "maxSubWindows", Value: maxSubWindows, Doc: "64"},
			{What: "Quota × window steps, Burst × emission interval", Const: "maxProduct", Value: maxProduct, Doc: "2^51 = 2,251,799,813,685,248"},
		},
		Filled: []doctable.Filled{
			{Config: "Config", Zero: Config{}, With: c},
			{Config: "Limit", Zero: Limit{Algorithm: SubWindowCounter, Quota: 100, Window: time.Minute}, With: subw.p},
			{Config: "Limit", Zero: Limit{Algorithm: TokenBucket, Quota: 100, Window: time.Minute}, With: bucket.p},
		},
	})
	assert.Equal(t, bucket.p.Quota, bucket.p.Burst, "a bucket's Burst defaults to its Limit")
}

// TestConfigValidate: withDefaults changes no field that is set, and
// validate names the bad field in the package's form, on the Config as
// New sees it (its defaults filled in), without building anything.
func TestConfigValidate(t *testing.T) {
	set := Config{Shards: 8, MaxKeys: 100, Overflow: OverflowShared, Clock: clocktest.Wall{}, SweepInterval: time.Second, NoBackgroundSweep: true}
	assert.Equal(t, set, set.withDefaults(), "withDefaults changed a field that was set")
	require.NoError(t, Config{}.withDefaults().validate())
	require.NoError(t, set.validate())
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Shards: 3}, "local: invalid config: Shards 3: must be a power of two from 1 to 65536"},
		{Config{Shards: 1 << 17}, "local: invalid config: Shards 131072: must be a power of two from 1 to 65536"},
		{Config{MaxKeys: -1}, "local: invalid config: MaxKeys -1: must be positive"},
		{Config{Overflow: 9}, "local: invalid config: Overflow 9: unknown policy"},
		{Config{SweepInterval: -time.Second}, "local: invalid config: SweepInterval -1s: must be positive"},
	} {
		err := tc.cfg.withDefaults().validate()
		assert.True(t, errors.Is(err, ErrInvalidConfig), "%+v: %v", tc.cfg, err)
		assert.EqualError(t, err, tc.want)
	}
}
