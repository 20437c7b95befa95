package table

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), c.in...)
		assert.Equal(t, c.want, Median(in), "Median(%v)", c.in)
		assert.Equal(t, c.in, in, "Median(%v) leaves its input in order", c.in)
	}
}

func TestPrint(t *testing.T) {
	rows := [][]string{{"name", "ns/op"}, {"a", "1.5"}, {"longer", "12.0"}}
	var b strings.Builder
	Print(&b, rows, false)
	want := "name    ns/op\na       1.5\nlonger  12.0\n"
	assert.Equal(t, want, b.String(), "plain")
	b.Reset()
	Print(&b, rows, true)
	want = "| name | ns/op |\n|---|---|\n| a | 1.5 |\n| longer | 12.0 |\n"
	assert.Equal(t, want, b.String(), "markdown")
}
