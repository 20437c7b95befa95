package fallback

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleRecord(origin string, b byte) record {
	var k digest
	for i := range k {
		k[i] = b + byte(i)
	}
	return record{origin: origin, key: k, window: 29_000_123, seq: 1_700_000_000_000_000_000, consumed: 4321, demand: 12.5}
}

func TestRecordRoundTrip(t *testing.T) {
	tests := []record{
		sampleRecord("node-a", 1),
		{origin: "x", window: -3, seq: 1, consumed: 0, demand: 0},
		{origin: string(make([]byte, maxOrigin)), window: 1 << 62, seq: ^uint64(0), consumed: maxCount, demand: 0x1p120},
	}
	for _, r := range tests {
		b := appendRecord(nil, &r)
		assert.LessOrEqual(t, len(b), maxRecordLen)
		got, err := decodeRecord(b)
		require.NoError(t, err)
		assert.Equal(t, r, got)
	}
}

func TestRecordRejectsMalformed(t *testing.T) {
	good := appendRecord(nil, &record{origin: "n", seq: 1, demand: 1})
	nan := append([]byte(nil), good...)
	copy(nan[len(nan)-4:], []byte{0x7f, 0xc0, 0, 0})
	neg := append([]byte(nil), good...)
	copy(neg[len(neg)-4:], []byte{0xbf, 0x80, 0, 0})
	tests := map[string][]byte{
		"empty":          nil,
		"wrong type":     append([]byte{msgState}, good[1:]...),
		"truncated":      good[:len(good)-1],
		"trailing bytes": append(append([]byte(nil), good...), 0),
		"empty origin":   {msgRecord, 0},
		"long origin":    {msgRecord, maxOrigin + 1},
		"NaN demand":     nan,
		"negative":       neg,
		"count too big":  appendRecord(nil, &record{origin: "n", consumed: maxCount + 1}),
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := decodeRecord(b)
			assert.ErrorIs(t, err, errMalformed)
		})
	}
}

func TestStateRoundTrip(t *testing.T) {
	a, b := sampleRecord("a", 1), sampleRecord("bb", 2)
	got, err := decodeState(appendState(nil, []*record{&a, &b}))
	require.NoError(t, err)
	assert.Equal(t, []record{a, b}, got)

	empty, err := decodeState(appendState(nil, nil))
	require.NoError(t, err)
	assert.Empty(t, empty)

	_, err = decodeState([]byte{msgState, 0xff, 0xff, 0xff, 0xff, 0x0f})
	assert.ErrorIs(t, err, errMalformed, "a count the input cannot hold")
	full := appendState(nil, []*record{&a, &b})
	part, err := decodeState(full[:len(full)-1])
	assert.ErrorIs(t, err, errMalformed)
	assert.Equal(t, []record{a}, part, "records before the malformed one")
}

// FuzzRecord holds the decoders to never panic, to reject what they cannot
// read, and to give back what they accept when it is encoded again.
func FuzzRecord(f *testing.F) {
	a, b := sampleRecord("node-a", 1), sampleRecord("node-b", 9)
	f.Add(appendRecord(nil, &a))
	f.Add(appendState(nil, []*record{&a, &b}))
	f.Add([]byte{msgRecord, 0})
	f.Add([]byte{msgState, 0xff, 0xff, 0x03})
	f.Fuzz(func(t *testing.T, in []byte) {
		if r, err := decodeRecord(in); err == nil {
			again, err := decodeRecord(appendRecord(nil, &r))
			require.NoError(t, err)
			assert.Equal(t, r, again)
		}
		recs, err := decodeState(in)
		assert.LessOrEqual(t, len(recs), len(in)/25+1)
		if err == nil {
			ptrs := make([]*record, len(recs))
			for i := range recs {
				ptrs[i] = &recs[i]
			}
			again, err := decodeState(appendState(nil, ptrs))
			require.NoError(t, err)
			assert.Equal(t, len(recs), len(again))
			for i := range recs {
				assert.Equal(t, recs[i], again[i])
			}
		}
	})
}
