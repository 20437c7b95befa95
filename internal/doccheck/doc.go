// Package doccheck holds the test that keeps the repository's documentation
// self-contained: every link in README.md and docs/*.md must resolve to a
// file (and heading) inside the repository, or be an http(s) URL to a public
// standard or paper. It has no exported API; run it with go test.
package doccheck
