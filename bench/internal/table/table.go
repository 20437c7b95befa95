// Package table holds what the commands that turn benchmark output into the
// tables of docs/ share: the median of the runs and a table printer.
package table

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Median returns the median of v, or 0 when v is empty. v is not modified.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Print writes rows to w, the first row as the header: a Markdown table when
// markdown is set, else columns aligned with two spaces between them.
func Print(w io.Writer, rows [][]string, markdown bool) {
	if len(rows) == 0 {
		return
	}
	if markdown {
		for i, r := range rows {
			fmt.Fprintln(w, "| "+strings.Join(r, " | ")+" |")
			if i == 0 {
				fmt.Fprintln(w, "|"+strings.Repeat("---|", len(r)))
			}
		}
		return
	}
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			if i < len(width) {
				width[i] = max(width[i], len([]rune(c)))
			}
		}
	}
	for _, r := range rows {
		var b strings.Builder
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 && i < len(width) {
				b.WriteString(strings.Repeat(" ", width[i]-len([]rune(c))+2))
			}
		}
		fmt.Fprintln(w, b.String())
	}
}
