package localx

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/localhook"
	"github.com/hybridlimit/hybridlimit/local"
)

// Package local's multi-rule decisions, set when it loads.
var (
	checkMultiAt   = localhook.CheckMultiAt.(func(time.Time, []local.Request, []local.Decision) bool)
	allowMultiIfAt = localhook.AllowMultiIfAt.(func(time.Time, []local.Request, []local.Decision, func() bool) bool)
)

// CheckMultiAt reports whether local.AllowMultiAt would admit reqs at now,
// and charges nothing. It writes into out the Decisions of a refusal:
// Allowed false everywhere, ReasonOK for a rule with room, and why the
// others refuse.
func CheckMultiAt(now time.Time, reqs []local.Request, out []local.Decision) bool {
	return checkMultiAt(now, reqs, out)
}

// AllowMultiIfAt is local.AllowMultiAt with one more condition: when every
// request has room, it calls commit, the keys still locked, and charges
// them only if commit returns true. commit is called at most once; it must
// not wait on anything but other keys' locks, nor decide any of these keys.
// It allocates nothing for up to eight requests, when commit does not
// escape.
func AllowMultiIfAt(now time.Time, reqs []local.Request, out []local.Decision, commit func() bool) bool {
	return allowMultiIfAt(now, reqs, out, commit)
}
