package local

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestShaperBound runs FuzzShaper's checks on random mixes of AllowNAt,
// ReserveAt, CancelAt and SetLimit: each decision and reservation is held
// to the model, and every interval [t0, t1] to at most burst + rate·(t1 −
// t0) admitted or acting. The mixes lean towards what breaks the bound
// when reservations are mishandled: short steps, long queues, small
// bursts, and limits changed while a queue is pending.
func TestShaperBound(t *testing.T) {
	for seed := range uint64(400) {
		data := shaperMix(seed)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("as a FuzzShaper input: %q", data)
				}
			})
			checkShaper(t, data)
		})
	}
}

// shaperMix returns FuzzShaper's input for a random mix.
func shaperMix(seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	limit := func() (byte, byte, byte) {
		return byte(rng.IntN(20)), byte(rng.IntN(len(fuzzWindows))), byte(1 + rng.IntN(3))
	}
	a, b, c := limit()
	data := []byte{byte(rng.IntN(3)), a, b, c}
	for range 20 + rng.IntN(150) {
		op := make([]byte, 5)
		switch k := rng.IntN(20); {
		case k < 10:
			op[0], op[3], op[4] = 1, byte(rng.IntN(4)), byte(rng.IntN(256))
			if rng.IntN(3) == 0 {
				op[4] = 0xff // as Wait does without a deadline
			}
		case k < 15:
			op[0], op[3] = 0, byte(rng.IntN(4))
		case k < 18:
			op[0], op[3] = 2, byte(rng.IntN(256))
		default:
			op[0] = 3
			op[2], op[3], op[4] = limit()
		}
		if op[0] != 3 {
			switch k := rng.IntN(10); {
			case k < 4: // the same instant
				op[1], op[2] = 0, 0xc0
			case k < 6: // up to two windows
				dt := rng.IntN(1 << 13)
				op[1], op[2] = byte(dt), byte(dt>>8)
			default: // a short step, so that queues build up
				op[1] = byte(rng.IntN(64))
			}
		}
		data = append(data, op...)
	}
	return data
}
