package accuracy

import (
	"math"
	"math/bits"
	"time"
)

// Hist is a log-linear histogram of durations in ns: exact below 16 ns,
// then 8 buckets per power of two (each at most 12.5% wide). Nodes keep one
// per second of the run (Slices), so the outage run can tell its p99 second
// by second; JSON-encoded with trailing zeros cut.
type Hist []int64

const histBuckets = 8 + 8*60

func histIndex(ns int64) int {
	if ns < 16 {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 4
	return 8 + 8*e + int(ns>>e) - 8
}

// histUpper returns the largest duration (ns) bucket i holds.
func histUpper(i int) int64 {
	if i < 16 {
		return int64(i)
	}
	e := (i - 8) / 8
	m := int64((i-8)%8 + 8)
	return (m+1)<<e - 1
}

// Slices is a node's latency histograms, one per second since T0.
type Slices []Hist

// Add counts a decision made at rel (µs since T0) that took d.
func (s *Slices) Add(rel int64, d time.Duration) {
	i := int(max(rel/1e6, 0))
	for len(*s) <= i {
		*s = append(*s, nil)
	}
	h := (*s)[i]
	if h == nil {
		h = make(Hist, histBuckets)
		(*s)[i] = h
	}
	h[histIndex(int64(d))]++
}

// Trim cuts each histogram's trailing zeros, for a smaller file.
func (s Slices) Trim() {
	for i, h := range s {
		n := len(h)
		for n > 0 && h[n-1] == 0 {
			n--
		}
		s[i] = h[:n]
	}
}

// merge adds h into into, growing it.
func (into *Hist) merge(h Hist) {
	for len(*into) < len(h) {
		*into = append(*into, 0)
	}
	for i, c := range h {
		(*into)[i] += c
	}
}

// Count returns the number of durations in h.
func (h Hist) Count() int64 {
	var n int64
	for _, c := range h {
		n += c
	}
	return n
}

// Quantile returns the q-quantile of h in µs (the upper edge of its
// bucket), NaN when h is empty.
func (h Hist) Quantile(q float64) float64 {
	n := h.Count()
	if n == 0 {
		return math.NaN()
	}
	rank := int64(math.Ceil(q * float64(n)))
	var seen int64
	for i, c := range h {
		seen += c
		if seen >= max(rank, 1) {
			return float64(histUpper(i)) / 1000
		}
	}
	return float64(histUpper(len(h)-1)) / 1000
}
