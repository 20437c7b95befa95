package fallback

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allowances returns each node's allowance for limit when every node works
// from the same records (counts, demands) and members nodes.
func allowances(limit int64, counts []int64, demands []float64, members int, reserve float64) []int64 {
	var total int64
	var sum float64
	for i := range counts {
		total += counts[i]
		sum += demands[i]
	}
	out := make([]int64, len(counts))
	for i := range counts {
		e := estimate{Known: true, Own: counts[i], Total: total, Share: share(demands[i], sum, members, reserve), Members: members}
		out[i] = e.Allowance(limit)
	}
	return out
}

func TestShareSplit(t *testing.T) {
	const limit = 1000
	tests := []struct {
		name    string
		counts  []int64
		demands []float64
		members int
		// want is each node's allowance.
		want []int64
	}{
		{"uniform", []int64{100, 100, 100, 100, 100}, []float64{10, 10, 10, 10, 10}, 5, []int64{200, 200, 200, 200, 200}},
		{"skewed 80/5", []int64{400, 25, 25, 25, 25}, []float64{80, 5, 5, 5, 5}, 5,
			// left 500: hot (0.95×0.8+0.01)=0.77 → 385; others 0.95×0.05+0.01=0.0575 → 28
			[]int64{400 + 385, 25 + 28, 25 + 28, 25 + 28, 25 + 28}},
		{"one node alone with demand", []int64{300, 0, 0}, []float64{50, 0, 0}, 3,
			// left 700: 0.95+0.05/3 of it
			[]int64{300 + 676, 0 + 11, 0 + 11}},
		{"no demand known: even", []int64{0, 0, 0, 0}, []float64{0, 0, 0, 0}, 4, []int64{250, 250, 250, 250}},
		{"over the limit already", []int64{700, 400}, []float64{1, 1}, 2, []int64{700, 400}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := allowances(limit, tt.counts, tt.demands, tt.members, 0.05)
			assert.Equal(t, tt.want, got)
			var total, counted int64
			for i := range got {
				total += got[i]
				counted += tt.counts[i]
			}
			assert.LessOrEqual(t, total, max(int64(limit), counted), "allowances sum past the limit")
		})
	}
}

// TestShareBeatsTheNaiveSplits holds the demand split against the two it
// replaces: an even split starves a hot node, and admitting while the
// gossiped sum is below the limit lets every node take all that is left.
func TestShareBeatsTheNaiveSplits(t *testing.T) {
	const limit, nodes = 1000, 5
	// Skewed: one node sees 96% of the demand, nothing admitted yet.
	demands := []float64{96, 1, 1, 1, 1}
	got := allowances(limit, make([]int64, nodes), demands, nodes, 0.05)
	even := int64(limit / nodes)
	assert.Greater(t, got[0], 4*even, "the hot node gets more than 4× an even split")
	// Uniform: the naive rule lets each node admit the whole remainder.
	counts := []int64{100, 100, 100, 100, 100}
	naive := int64(0)
	for range nodes {
		naive += counts[0] + (limit - 500)
	}
	require.Greater(t, naive, int64(limit))
	var sum int64
	for _, a := range allowances(limit, counts, []float64{1, 1, 1, 1, 1}, nodes, 0.05) {
		sum += a
	}
	assert.LessOrEqual(t, sum, int64(limit))
}

func TestShareSumsToOne(t *testing.T) {
	tests := []struct {
		demands []float64
		members int
	}{
		{[]float64{1, 2, 3}, 3},
		{[]float64{5, 0, 0, 0}, 4},
		{[]float64{5, 5}, 4}, // two members hold no record yet
		{[]float64{0, 0}, 2},
		{[]float64{1e9, 1e-9}, 2},
	}
	for _, tt := range tests {
		var sum, total float64
		for _, d := range tt.demands {
			sum += d
		}
		for _, d := range tt.demands {
			s := share(d, sum, tt.members, 0.05)
			assert.GreaterOrEqual(t, s, 0.0)
			total += s
		}
		assert.LessOrEqual(t, total, 1+1e-12, "demands %v over %d members", tt.demands, tt.members)
	}
}

func TestEWMA(t *testing.T) {
	assert.InDelta(t, 50, ewma(0, 100, 1, 1), 1e-9, "one half-life goes half way")
	assert.InDelta(t, 75, ewma(0, 100, 2, 1), 1e-9)
	assert.Equal(t, 7.0, ewma(7, 100, 0, 1), "no time, no change")
	got := 0.0
	for range 100 {
		got = ewma(got, 40, 0.2, 2)
	}
	assert.InDelta(t, 40, got, 0.1, "converges on a steady rate")
}
