package table

import (
	"strings"
	"testing"
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
		if got := Median(in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Errorf("Median(%v) reordered its input to %v", c.in, in)
				break
			}
		}
	}
}

func TestPrint(t *testing.T) {
	rows := [][]string{{"name", "ns/op"}, {"a", "1.5"}, {"longer", "12.0"}}
	var b strings.Builder
	Print(&b, rows, false)
	want := "name    ns/op\na       1.5\nlonger  12.0\n"
	if b.String() != want {
		t.Errorf("plain:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	Print(&b, rows, true)
	want = "| name | ns/op |\n|---|---|\n| a | 1.5 |\n| longer | 12.0 |\n"
	if b.String() != want {
		t.Errorf("markdown:\n%s\nwant:\n%s", b.String(), want)
	}
}
