package syncer

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

// pack is Lua's struct.pack('<dddddd', ...): what a single-rule script
// answers.
func pack(fs ...float64) string {
	b := make([]byte, 0, 8*len(fs))
	for _, f := range fs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return string(b)
}

// TestUnpack: a single-rule script's packed answer is read exactly, to
// 2^53 (a time in µs, a limit), and anything else is refused, not misread.
func TestUnpack(t *testing.T) {
	want := [decisionLen]int64{1, 0, 1 << 53, 999_999, 1_763_800_000_123_456, 42}
	var fs []float64
	for _, v := range want {
		fs = append(fs, float64(v))
	}
	got, ok := unpack(pack(fs...))
	assert.True(t, ok, "unpack refused its own packing")
	assert.Equal(t, want, got, "unpack")
	for name, s := range map[string]string{
		"empty":        "",
		"five numbers": pack(0, 1, 2, 3, 4),
		"seven":        pack(0, 1, 2, 3, 4, 5, 6),
		"a fraction":   pack(0, 1, 2.5, 3, 4, 5),
		"above 2^53":   pack(0, 1, 1<<54, 3, 4, 5),
		"NaN":          pack(0, math.NaN(), 2, 3, 4, 5),
		"infinite":     pack(0, 1, 2, math.Inf(1), 4, 5),
		"text":         "0,1,2,3,4,5 and more text: 48 bytes long, too...",
	} {
		v, ok := unpack(s)
		assert.False(t, ok, "%s (%d bytes): unpacked as %v, want refused", name, len(s), v)
	}
}

// BenchmarkSingleCall: what central mode does on the client before go-redis
// (key names, arguments), per decision, for a bucket rule.
func BenchmarkSingleCall(b *testing.B) {
	r, err := NewRule("api", local.Limit{Algorithm: local.GCRA, Quota: 1000, Window: time.Second})
	require.NoError(b, err)
	ks := Keyspace{}
	b.ReportAllocs()
	for b.Loop() {
		keys, args := singleCall(&ks, "", r, "user-12345", 1)
		if len(keys) != 1 || len(args) != 7 {
			b.Fatal(keys, args)
		}
	}
}

// BenchmarkBound: the deadline central mode puts on each call whose
// context has none as near as Timeout (a context.WithDeadline and its
// cancel).
func BenchmarkBound(b *testing.B) {
	c := &Central{timeout: defaultTimeout}
	parent, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := c.bound(parent)
		if _, ok := ctx.Deadline(); !ok {
			b.Fatal("no deadline")
		}
		cancel()
	}
}
