package doccheck

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// claim is one bullet of the README's "Measured" section: its text, the
// page it cites, and the figures in it.
type claim struct {
	text    string
	page    string // relative to the repository's root; "" when it cites none
	figures []string
}

var (
	// figure matches a number as the README writes one: 17.8, 10,000,
	// +0.00, each end of a range 136–287 on its own.
	figure = regexp.MustCompile(`\d+(?:,\d{3})*(?:\.\d+)?`)
	// linkTarget matches a link's target, which holds no figures.
	linkTarget = regexp.MustCompile(`\]\([^)]*\)`)
)

// measuredClaims returns the bullets of the section "## Measured" of a
// README, each with the page it cites: the first docs/ page it links, or,
// for a bullet that says "the same page", the previous bullet's.
func measuredClaims(readme string) ([]claim, error) {
	_, sec, ok := strings.Cut(readme, "\n## Measured\n")
	if !ok {
		return nil, errNoSection
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var bullets []string
	for _, l := range strings.Split(sec, "\n") {
		switch {
		case strings.HasPrefix(l, "- "):
			bullets = append(bullets, strings.TrimPrefix(l, "- "))
		case strings.HasPrefix(l, "  ") && len(bullets) > 0:
			bullets[len(bullets)-1] += " " + strings.TrimSpace(l)
		}
	}
	var out []claim
	prev := ""
	for _, b := range bullets {
		c := claim{text: b}
		for _, m := range inlineLink.FindAllStringSubmatch(b, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if strings.HasPrefix(target, "docs/") && strings.HasSuffix(target, ".md") {
				c.page = path.Clean(target)
				break
			}
		}
		if c.page == "" && strings.Contains(b, "the same page") {
			c.page = prev
		}
		prev = c.page
		c.figures = figure.FindAllString(linkTarget.ReplaceAllString(b, "]"), -1)
		out = append(out, c)
	}
	return out, nil
}

// errNoSection reports a README without a "## Measured" section.
var errNoSection = errors.New(`README.md has no section "## Measured"`)

// contains reports whether page holds the figure f as a number of its own:
// not part of a longer number. A figure with thousands separators also
// matches its digits written without them.
func contains(page, f string) bool {
	for _, form := range []string{f, strings.ReplaceAll(f, ",", "")} {
		re := regexp.MustCompile(`(^|[^\d.,])` + regexp.QuoteMeta(form) + `($|[^\d]|[.,][^\d])`)
		if re.MatchString(page) {
			return true
		}
	}
	return false
}

// missingFigures returns, for each claim, the figures its page does not
// contain, as "page: figure (in: the claim's start)".
func missingFigures(claims []claim, read func(page string) (string, error)) []string {
	var out []string
	for _, c := range claims {
		start := c.text
		if r := []rune(start); len(r) > 60 {
			start = string(r[:60]) + "…"
		}
		if c.page == "" {
			if len(c.figures) > 0 {
				out = append(out, "a claim with figures cites no docs/ page: "+start)
			}
			continue
		}
		page, err := read(c.page)
		if err != nil {
			out = append(out, c.page+": "+err.Error())
			continue
		}
		for _, f := range c.figures {
			if !contains(page, f) {
				out = append(out, c.page+": "+f+" (in: "+start+")")
			}
		}
	}
	return out
}

// TestReadmeFigures: every figure in the README's "Measured" section
// appears in the page that bullet cites, so a headline cannot drift from
// the measurement it quotes.
func TestReadmeFigures(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	claims, err := measuredClaims(string(readme))
	require.NoError(t, err)
	require.NotEmpty(t, claims, "no bullets in the Measured section")
	n := 0
	for _, c := range claims {
		n += len(c.figures)
	}
	require.Greater(t, n, 20, "too few figures found: the extraction is broken")
	missing := missingFigures(claims, func(page string) (string, error) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
		return string(b), err
	})
	assert.Empty(t, missing, "figures of README.md's Measured section that the page it cites does not contain")
}

// TestMissingFigures: the check finds the cited page (a later link, the
// same page as the previous bullet), reads ranges and separators, and
// names a figure the page does not hold, and only it.
func TestMissingFigures(t *testing.T) {
	readme := "# x\n\n## Measured\n\nEvery figure from 2 cores.\n\n" +
		"- **Speed** ([perf](docs/perf.md#a)): 17.8–20.7 ns,\n  1.16× the limit over 10,000 keys.\n" +
		"- **Again** (the same page): +0.35% and 3 × more.\n" +
		"- **Other** ([x](docs/x.md)): none.\n" +
		"- **Loose**: 5 figures.\n\n## Next\n\n- 99 not read\n"
	claims, err := measuredClaims(readme)
	require.NoError(t, err)
	require.Len(t, claims, 4)
	assert.Equal(t, "docs/perf.md", claims[0].page)
	assert.Equal(t, []string{"17.8", "20.7", "1.16", "10,000"}, claims[0].figures)
	assert.Equal(t, "docs/perf.md", claims[1].page, "the same page")
	assert.Equal(t, []string{"0.35", "3"}, claims[1].figures)
	assert.Equal(t, "docs/x.md", claims[2].page)
	assert.Empty(t, claims[2].figures)

	pages := map[string]string{
		"docs/perf.md": "| a | 17.8 ns | 20.7 ns |\n| keys | 10000 |\n1.161 and 11.16 are other numbers; 0.35, 3.\n",
		"docs/x.md":    "",
	}
	read := func(p string) (string, error) { return pages[p], nil }
	missing := missingFigures(claims, read)
	assert.Equal(t, []string{
		"docs/perf.md: 1.16 (in: **Speed** ([perf](docs/perf.md#a)): 17.8–20.7 ns, 1.16× the …)",
		"a claim with figures cites no docs/ page: **Loose**: 5 figures.",
	}, missing)

	_, err = measuredClaims("# x\n\n## Results\n")
	assert.Error(t, err)
}

// outageBullet is the README's outage claim: which rows of docs/outage.md's
// table it quotes, and what it says each mode admitted there.
var outageBullet = regexp.MustCompile(`a fixed window offered ([\d.]+)× its limit, Redis killed for ten windows: ` +
	"`Gossip` admitted ([\\d.]+)× the limit with uniform traffic and ([\\d.]+)× with 90% on one node, where " +
	"`FailLocal` admitted ([\\d.]+)× and independent local limits ([\\d.]+)× to ([\\d.]+)×")

// outageRows returns the rows of the first table of an outage page, each
// cell by its header.
func outageRows(page string) []map[string]string {
	var header []string
	var rows []map[string]string
	for _, l := range strings.Split(page, "\n") {
		if !strings.HasPrefix(l, "|") {
			if header != nil {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case header == nil:
			header = cells
		case strings.Trim(l, "|-: ") == "":
		case len(cells) == len(header):
			r := map[string]string{}
			for i, h := range header {
				r[h] = cells[i]
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// checkOutage returns what the outage bullet of a README says that the
// rows of its table do not: the mean admitted (a cell's first figure) of
// the Gossip and FailLocal columns, and the range of the alone column,
// in the rows of the scenario the bullet describes.
func checkOutage(readme, page string) []string {
	flat := strings.Join(strings.Fields(readme), " ")
	m := outageBullet.FindStringSubmatch(flat)
	if m == nil {
		return []string{"README.md: no outage bullet in the expected form (" + outageBullet.String() + ")"}
	}
	offered, fbUniform, fbSkewed, flSkewed, aloneLo, aloneHi := m[1], m[2], m[3], m[4], m[5], m[6]
	mean := func(cell string) string { f, _, _ := strings.Cut(cell, " "); return f }
	row := map[string]map[string]string{}
	for _, r := range outageRows(page) {
		// The README speaks of the 5 nodes' steady arrivals.
		if r["Redis"] == "kill" && r["algorithm"] == "fixed window" && r["offered"] == offered+" × L" && r["arrivals"] != "poisson" {
			row[r["workload"]] = r
		}
	}
	var out []string
	uniform, skewed := row["uniform"], row["90% on one"]
	if uniform == nil || skewed == nil {
		return []string{"docs/outage.md: no rows for Redis kill, fixed window, " + offered + " × L, uniform and 90% on one"}
	}
	want := func(what, readme, cell string) {
		if readme != mean(cell) {
			out = append(out, "docs/outage.md: "+what+": the README says "+readme+"×, the page "+mean(cell))
		}
	}
	want("Gossip, uniform", fbUniform, uniform["Gossip"])
	want("Gossip, 90% on one", fbSkewed, skewed["Gossip"])
	want("FailLocal, 90% on one", flSkewed, skewed["FailLocal"])
	lo, hi := mean(uniform["alone"]), mean(skewed["alone"])
	if lo > hi {
		lo, hi = hi, lo
	}
	want("alone, the lower", aloneLo, lo)
	want("alone, the higher", aloneHi, hi)
	return out
}

// TestReadmeOutage: the README's outage bullet gives what docs/outage.md's
// table measured in the scenario it describes; a figure found elsewhere in
// the table (another load, a bracket's bound) does not count.
func TestReadmeOutage(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	page, err := os.ReadFile(filepath.Join(root, "docs", "outage.md"))
	require.NoError(t, err)
	assert.Empty(t, checkOutage(string(readme), string(page)))
}

// TestCheckOutage: each figure of the bullet is compared with its cell.
func TestCheckOutage(t *testing.T) {
	page := "# o\n\n| Redis | algorithm | offered | workload | Gossip | FailLocal | alone |\n|---|---|---|---|---|---|---|\n" +
		"| kill | fixed window | 1.5 × L | uniform | 1.00 [0.99–1.00] | 1.00 [1.00–1.00] | 1.50 [1.50–1.50] |\n" +
		"| kill | fixed window | 1.5 × L | 90% on one | 1.00 [1.00–1.16] | 0.35 [0.35–0.35] | 1.15 [1.15–1.15] |\n" +
		"| kill | fixed window | 5.0 × L | 90% on one | 1.04 [1.00–1.01] | 0.70 [0.69–0.70] | 1.50 [1.50–1.50] |\n"
	bullet := func(a, b, c, d, e string) string {
		return "- **Through a Redis outage** ([outage](docs/outage.md)): 5 nodes, a fixed\n  window offered 1.5× its limit, Redis killed for ten windows: `Gossip`\n  admitted " +
			a + "× the limit with uniform traffic and " + b + "× with 90% on one\n  node, where `FailLocal` admitted " + c + "× and independent local limits " + d + "×\n  to " + e + "×.\n"
	}
	assert.Empty(t, checkOutage(bullet("1.00", "1.00", "0.35", "1.15", "1.50"), page))
	assert.Equal(t, []string{
		"docs/outage.md: Gossip, uniform: the README says 1.16×, the page 1.00",
		"docs/outage.md: Gossip, 90% on one: the README says 1.04×, the page 1.00",
	}, checkOutage(bullet("1.16", "1.04", "0.35", "1.15", "1.50"), page))
	assert.Equal(t, []string{"docs/outage.md: alone, the higher: the README says 1.40×, the page 1.50"},
		checkOutage(bullet("1.00", "1.00", "0.35", "1.15", "1.40"), page))
	assert.Len(t, checkOutage("no such bullet", page), 1)
}
