package doccheck

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// historyWord matches words that tell how the code was developed rather
// than what it is (numbered stops and issues), and links to files outside
// the repository. (The character class keeps this file from matching itself.)
var historyWord = regexp.MustCompile(`\bstops? [0-9]+\b|\bissue #?[0-9]+\b|shared/DESIG[N]`)

// historyRoots are the paths, relative to the repository's root, whose files
// must not carry history words.
var historyRoots = []string{"README.md", "Makefile", ".ci", "docs", "bench", "scripts", "examples", "local", "syncer", "fallback", "hybrid", "internal"}

// history returns the lines of the files under root's historyRoots (images
// and .git left out) that match historyWord, as "path:line: text".
func history(root string, roots []string) ([]string, error) {
	var out []string
	for _, r := range roots {
		err := filepath.WalkDir(filepath.Join(root, filepath.FromSlash(r)), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == ".git" || d.Name() == ".run" {
					return filepath.SkipDir
				}
				return nil
			}
			if strings.HasSuffix(p, ".svg") {
				return nil
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 1<<20)
			for n := 1; sc.Scan(); n++ {
				if historyWord.MatchString(sc.Text()) {
					out = append(out, filepath.ToSlash(rel)+":"+strconv.Itoa(n)+": "+sc.Text())
				}
			}
			return sc.Err()
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
