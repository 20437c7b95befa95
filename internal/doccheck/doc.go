// Package doccheck holds the tests that keep the repository's documentation
// self-contained and true to its sources: every link in README.md and
// docs/*.md must resolve to a file (and heading) inside the repository, or
// be an http(s) URL to a public standard or paper; the README's code is the
// Examples' verbatim; and every figure of the README's "Measured" section
// is in the page it cites (the outage figures in the table's row they
// describe). It has no exported API; run it with go test.
package doccheck
