package syncer

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/lease"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestDecodeReplyLength: a reply one value short or long, or empty, is an
// error wrapping ErrRedis from every decoder, never a panic or a misread.
func TestDecodeReplyLength(t *testing.T) {
	decoders := map[string]struct {
		n      int
		decode func([]int64) error
	}{
		"lease_window": {leaseWindowLen, func(v []int64) error { _, err := decodeLeaseWindow(v); return err }},
		"lease_bucket": {leaseBucketLen, func(v []int64) error { _, err := decodeLeaseBucket(v); return err }},
		"registry":     {2, func(v []int64) error { _, err := decodeRegistry(v, false); return err }},
		"registry of regions": {3, func(v []int64) error {
			r, err := decodeRegistry(v, true)
			if err == nil && len(v) == 3 && r.Regions != v[2] {
				return fmt.Errorf("regions %d, not %d", r.Regions, v[2])
			}
			return err
		}},
		"refund":     {decisionLen, func(v []int64) error { _, err := decodeRefund(v); return err }},
		"multi of 2": {1 + 2*decisionLen, func(v []int64) error { _, _, err := decodeMulti(v, 2); return err }},
	}
	for name, d := range decoders {
		t.Run(name, func(t *testing.T) {
			for _, n := range []int{0, 1, d.n - 1, d.n + 1} {
				err := d.decode(make([]int64, n))
				assert.ErrorIs(t, err, ErrRedis, "%d values", n)
				assert.ErrorContains(t, err, name[:min(len(name), 5)], "%d values: the error names the script", n)
			}
			assert.NoError(t, d.decode(make([]int64, d.n)), "%d values", d.n)
		})
	}
}

// TestDecodeLeaseWindow: each value of the window script's reply lands in
// the field its header names.
func TestDecodeLeaseWindow(t *testing.T) {
	v, err := decodeLeaseWindow([]int64{1, 2, 3, 4, 5, 6, 7, 8, 1, 0, 11, 12, 1})
	require.NoError(t, err)
	assert.Equal(t, lease.WindowReply{
		Now: 1, Window: 2, Epoch: 3, Granted: 4, Used: 5, Committed: 6, NextGranted: 7, PrevCommitted: 8,
		Revoked: true, Exhausted: false, Live: 11, Room: 12, Paced: true,
	}, v)
}

// TestDecodeLeaseBucket: each value of the bucket script's reply lands in
// the field its header names.
func TestDecodeLeaseBucket(t *testing.T) {
	v, err := decodeLeaseBucket([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 11, 1})
	require.NoError(t, err)
	assert.Equal(t, lease.BucketReply{
		Now: 1, Epoch: 2, Rate: 3, Burst: 4, Expiry: 5, Grant: 6, Pool: 7, PoolRate: 8, PoolCap: 9,
		Revoked: true, Live: 11, Rationed: true,
	}, v)
}

// TestEncodeLease: the requests' fields go to the positions the scripts'
// headers give them: now, node and the rule's fingerprint, then the
// numbers packed as little-endian doubles, the rule's last.
func TestEncodeLease(t *testing.T) {
	c := leaseConsts{now: "99", node: "n", leaseTTL: 500, demandTTL: 600}
	r, err := NewRule("r", local.Limit{Algorithm: local.FixedWindow, Quota: 7, Window: time.Second})
	require.NoError(t, err)
	ruleNums := []float64{1, 7, 1e6, 0, 0, 0, 0, 0, 0, 0} // alg, L, W (µs), burst, step, ws, rl, el, tau, anchored
	unpack := func(t *testing.T, s any) []float64 {
		b := s.([]byte)
		require.Zero(t, len(b)%8)
		v := make([]float64, len(b)/8)
		for i := range v {
			v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
		return v
	}
	w := encodeLeaseWindow(&lease.Request{
		Release: true, Demand: -1, WantCur: 4, WantNext: 5, Horizon: 6, Prev: lease.Report{Window: 7, Used: 8},
		Cur: lease.Report{Window: 9, Used: 10}, Nodes: 11, GuessTTL: 12, PaceSpan: 13, WaitCur: 14,
	}, c, r, &globalArgs{regions: 15, keep: 16})
	require.Len(t, w, 4)
	assert.Equal(t, []any{"99", "n", r.fp}, w[:3])
	assert.Equal(t, append([]float64{1 | flagGlobal, -1, 4, 5, 6, 7, 8, 9, 10, 600, 11, 12, 13, 14, 15, 16}, ruleNums...), unpack(t, w[3]))
	plain := encodeLeaseWindow(&lease.Request{Demand: 3}, c, r, nil)
	assert.Equal(t, append([]float64{0, 3, 0, 0, 0, 0, 0, 0, 0, 600, 0, 0, 0, 0, 0, 0}, ruleNums...), unpack(t, plain[3]))
	b := encodeLeaseBucket(&lease.Request{
		Bucket: true, Seq: 3, Demand: 5, Tokens: 6, Debt: 7, Rate: 10, Burst: 11, Expiry: 1 << 52, Nodes: 13,
		Horizon: 14, Allowance: 15, Want: 16, Return: 17,
	}, c, r)
	require.Len(t, b, 4)
	assert.Equal(t, []any{"99", "n", r.fp}, b[:3])
	assert.Equal(t, append([]float64{3, 0, 5, 6, 7, 500, 600, 10, 11, 1 << 52, 13, 14, 15, 16, 17}, ruleNums...), unpack(t, b[3]))
}

// TestApplyMalformedReply: a reply of the wrong length to a key's exchange
// fails that exchange: an error, the lease untouched but for its request
// no longer in flight and the fault recorded (the requests that wait for
// it are answered), and the entry's lock released.
func TestApplyMalformedReply(t *testing.T) {
	cl := lease.NewCluster(1)
	p := lease.Params{Interval: 100 * time.Millisecond, Horizon: 200 * time.Millisecond, MinGap: 10 * time.Millisecond, IdleRelease: 300 * time.Millisecond}
	store, err := keyed.New(keyed.Config{}, func(*lease.Lease, int64) bool { return false }, nil)
	require.NoError(t, err)
	for _, alg := range []local.Algorithm{local.FixedWindow, local.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			lr, err := lease.NewRule(localx.MustLimit(local.Limit{Algorithm: alg, Quota: 1000, Window: time.Second}), p, cl, nil)
			require.NoError(t, err)
			const now = int64(1_900_000_000_000_000)
			e := store.Get(alg.String(), now)
			e.Lock()
			e.Value.Decide(lr, now, 1)
			q := e.Value.Request(lr, now, false)
			require.True(t, e.Value.InFlight())
			before := e.Value
			e.Unlock()

			s := &syncer{}
			applied, err := s.apply(&pending{entry: e, rule: lr, req: q}, []int64{now, 1, 2}, now+100)
			assert.False(t, applied)
			assert.ErrorIs(t, err, ErrRedis)
			locked := make(chan struct{})
			go func() { e.Lock(); close(locked) }()
			select {
			case <-locked:
			case <-time.After(5 * time.Second):
				require.FailNow(t, "the entry's lock is left held")
			}
			assert.False(t, e.Value.InFlight(), "the request is still in flight")
			before.Answered()
			before.Fault()
			assert.Equal(t, before, e.Value, "a malformed reply changed the lease")
			e.Unlock()
		})
	}
}

// FuzzReplyDecoders: no reply, of any length or content, makes a decoder
// panic, and each accepts exactly the length its script answers.
func FuzzReplyDecoders(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 8*2))
	f.Add(make([]byte, 8*decisionLen))
	f.Add(make([]byte, 8*leaseBucketLen))
	f.Add(make([]byte, 8*leaseWindowLen))
	f.Add(make([]byte, 8*leaseWindowLen-3))
	f.Fuzz(func(t *testing.T, b []byte) {
		v := make([]int64, len(b)/8)
		for i := range v {
			v[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
		_, err := decodeLeaseWindow(v)
		assert.Equal(t, len(v) == leaseWindowLen, err == nil, "lease_window, %d values: %v", len(v), err)
		_, err = decodeLeaseBucket(v)
		assert.Equal(t, len(v) == leaseBucketLen, err == nil, "lease_bucket, %d values: %v", len(v), err)
		_, err = decodeRegistry(v, false)
		assert.Equal(t, len(v) == 2, err == nil, "registry, %d values: %v", len(v), err)
		_, err = decodeRegistry(v, true)
		assert.Equal(t, len(v) == 3, err == nil, "registry of regions, %d values: %v", len(v), err)
		_, err = decodeRefund(v)
		assert.Equal(t, len(v) == decisionLen, err == nil, "refund, %d values: %v", len(v), err)
		for n := range 3 {
			_, ds, err := decodeMulti(v, n)
			assert.Equal(t, len(v) == 1+decisionLen*n, err == nil, "multi of %d, %d values: %v", n, len(v), err)
			assert.Len(t, ds, map[bool]int{true: n}[err == nil])
		}
		if d, err := decodePacked(string(b)); err == nil {
			assert.Len(t, b, 8*decisionLen, "a packed decision accepted from %d bytes", len(b))
			assert.Equal(t, d, decisionOf(func() []int64 { u, _ := unpack(string(b)); return u[:] }()))
		}
	})
}

// TestEncodeSingle: a single-rule script takes now, the cost, then the
// rule's parameters: a bucket's own fingerprint and packed numbers, the
// full list for the others.
func TestEncodeSingle(t *testing.T) {
	r := &Rule{args: []any{"fp", "1"}, bargs: []any{"bfp", "packed"}}
	assert.Equal(t, []any{"99", int64(5), "fp", "1"}, encodeSingle("99", 5, r))
	r.bucket = true
	assert.Equal(t, []any{"", int64(5), "bfp", "packed"}, encodeSingle("", 5, r))
}

// TestEncodeMulti: lua/multi.lua takes two keys per rule (state, log), and
// now, then each rule's cost and parameters.
func TestEncodeMulti(t *testing.T) {
	a := &group{rule: &Rule{args: []any{"fa", "1"}}, state: "sa", log: "la", n: 2}
	b := &group{rule: &Rule{args: []any{"fb", "4"}, bargs: []any{"bucket's"}, bucket: true}, state: "sb", log: "lb", n: 3}
	keys, args := encodeMulti("99", []*group{a, b})
	assert.Equal(t, []string{"sa", "la", "sb", "lb"}, keys)
	assert.Equal(t, []any{"99", int64(2), "fa", "1", int64(3), "fb", "4"}, args)
}

// TestRefundCall: lua/refund.lua takes the state and log, and the time the
// reservation was decided at, its cost, the bucket's reset count, then the
// rule's parameters.
func TestRefundCall(t *testing.T) {
	g := &group{rule: &Rule{args: []any{"fp", "4"}}, state: "s", log: "l", n: 3, at: 1000, z: 2}
	c := refundCall(g)
	assert.Same(t, scriptRefund, c.script)
	assert.Equal(t, []string{"s", "l"}, c.keys)
	assert.Equal(t, []any{int64(1000), int64(3), int64(2), "fp", "4"}, c.args)
}
