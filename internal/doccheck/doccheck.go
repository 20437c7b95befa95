package doccheck

import (
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// publicHosts are the hosts an http(s) link may point to: public standards
// and papers, which outlive any copy of them in the repository.
var publicHosts = map[string]bool{
	"datatracker.ietf.org": true,
	"www.rfc-editor.org":   true,
	"rfc-editor.org":       true,
	"www.ietf.org":         true,
	"www.itu.int":          true,
	"arxiv.org":            true,
	"doi.org":              true,
	"dl.acm.org":           true,
	"go.dev":               true,
	"pkg.go.dev":           true,
}

var (
	// inlineLink matches [text](target) and ![alt](target), with an
	// optional title after the target.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// refDef matches a reference definition: [label]: target.
	refDef = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s.*)?$`)
	// codeSpan matches inline code, whose brackets are not links.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// heading matches an ATX heading.
	heading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	// htmlAnchor matches an explicit anchor: <a id="x"> or <a name="x">.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	// linkText reduces [text](target) to its text, as a rendered heading.
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	// htmlTag matches an HTML tag, which a rendered heading drops.
	htmlTag = regexp.MustCompile(`<[^>]*>`)
)

// link is one link found in a Markdown file.
type link struct {
	line   int
	target string
}

// proseLines returns the file's lines with fenced code blocks blanked, so
// that line numbers stay those of the file.
func proseLines(src string) []string {
	lines := strings.Split(src, "\n")
	fence := ""
	for i, l := range lines {
		t := strings.TrimLeft(l, " ")
		if fence != "" {
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			lines[i] = ""
			continue
		}
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			lines[i] = ""
		}
	}
	return lines
}

// links returns every inline link and reference definition outside code.
func links(src string) []link {
	var out []link
	for i, l := range proseLines(src) {
		l = codeSpan.ReplaceAllString(l, "")
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			out = append(out, link{i + 1, m[1]})
		}
		if m := refDef.FindStringSubmatch(l); m != nil {
			out = append(out, link{i + 1, m[1]})
		}
	}
	return out
}

// slug returns the anchor GitHub gives a heading: lower case, punctuation
// other than '-' and '_' dropped, HTML tags dropped, spaces turned into '-'.
func slug(text string) string {
	text = linkText.ReplaceAllString(text, "$1")
	text = strings.TrimSpace(htmlTag.ReplaceAllString(text, ""))
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors a Markdown file defines: its headings' slugs,
// numbered as GitHub numbers repeats (x, x-1, x-2), and explicit HTML anchors.
func anchors(src string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(src) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// trackedPaths returns the files git tracks under root and every directory
// holding one, slash-separated and relative to root.
func trackedPaths(root string) (map[string]bool, error) {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		return nil, err
	}
	paths := map[string]bool{}
	for _, f := range strings.Split(string(out), "\x00") {
		for ; f != "" && f != "." && !paths[f]; f = path.Dir(f) {
			paths[f] = true
		}
	}
	return paths, nil
}

// problem is a link that does not resolve, with the reason.
type problem struct {
	file   string
	line   int
	target string
	why    string
}

// check returns the problems of the links in file, a Markdown file inside
// root (both absolute and clean). When tracked is not nil, a link must also
// name a path it holds (slash-separated, relative to root, directories
// included): a file on disk that git does not track is not in the
// repository others check out.
func check(root, file string, tracked map[string]bool) ([]problem, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []problem
	bad := func(l link, why string) {
		out = append(out, problem{file, l.line, l.target, why})
	}
	for _, l := range links(string(src)) {
		u, err := url.Parse(l.target)
		if err != nil {
			bad(l, "not a URL: "+err.Error())
			continue
		}
		switch {
		case l.target == "":
			bad(l, "empty target")
			continue
		case u.Scheme == "http" || u.Scheme == "https":
			if !publicHosts[u.Hostname()] {
				bad(l, "points outside the repository, to a host not listed as a public standard or paper")
			}
			continue
		case u.Scheme != "" || u.Host != "":
			bad(l, "points outside the repository (scheme "+u.Scheme+")")
			continue
		case strings.HasPrefix(u.Path, "/"):
			bad(l, "absolute path: use a path relative to the file")
			continue
		}
		target := file
		if u.Path != "" {
			target = filepath.Join(filepath.Dir(file), filepath.FromSlash(u.Path))
			rel, err := filepath.Rel(root, target)
			if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				bad(l, "points outside the repository")
				continue
			}
			if _, err := os.Stat(target); err != nil {
				bad(l, "no such file in the repository")
				continue
			}
			if tracked != nil && rel != "." && !tracked[filepath.ToSlash(rel)] {
				bad(l, "not tracked by git")
				continue
			}
		}
		if u.Fragment == "" || !strings.HasSuffix(target, ".md") {
			continue
		}
		tsrc, err := os.ReadFile(target)
		if err != nil {
			bad(l, err.Error())
			continue
		}
		if !anchors(string(tsrc))[u.Fragment] {
			bad(l, "no heading with anchor #"+u.Fragment+" in "+filepath.Base(target))
		}
	}
	return out, nil
}
