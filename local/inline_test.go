package local

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hotInlined are the functions a decision on a key already held relies on
// being inlined: the exported entry points (so that they cost no call of
// their own), the word's decisions, the store's lookup and locking, and the
// µs helpers.
// Names are as the compiler reports them, without package qualifiers and
// type arguments. A generic method is reported inlinable through its small
// dictionary wrapper even when its body is not (keyed's Store.Get and
// Entry.LockLive), so only generic methods whose bodies inline are listed.
var hotInlined = []string{
	"(*Limiter).Allow",
	"(*Limiter).AllowN",
	"(*Limiter).AllowNAt",
	"(*Clock).Running",
	"clampTime",
	"(*compiled).fixedAt",
	"(*compiled).counterNow",
	"(*compiled).counterAt",
	"(*compiled).bucketWord",
	"verdict.decision",
	"makeDecision",
	"packedIn",
	"(*Store).shardOf",
	"(*table).find",
	"(*keyer).hash",
	"ident8",
	"le64",
	"mix",
	"(*Entry).Lock",
	"(*Entry).Unlock",
	"(*Entry).Evicted",
	"(*Entry).Standalone",
	"CeilDiv",
	"Duration",
}

// TestHotPathInlined builds local, internal/keyed, internal/usec and
// internal/coarse with the compiler's inlining report and fails when a
// function of hotInlined is no longer inlinable.
func TestHotPathInlined(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build with: %v", err)
	}
	cmd := exec.Command(goBin, "build", "-gcflags=-m",
		"github.com/hybridlimit/hybridlimit/local",
		"github.com/hybridlimit/hybridlimit/internal/keyed",
		"github.com/hybridlimit/hybridlimit/internal/usec",
		"github.com/hybridlimit/hybridlimit/internal/coarse")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build -gcflags=-m: %s", out)
	got := inlinable(out)
	require.NotEmpty(t, got, "no inlining report in: %s", out)
	for _, name := range hotInlined {
		assert.True(t, got[name], "%s is no longer inlinable", name)
	}
}

// inlinable returns the functions the compiler's -m report calls inlinable,
// named without package qualifiers and type arguments.
func inlinable(report []byte) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(report))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		_, rest, ok := strings.Cut(sc.Text(), ": can inline ")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(stripTypeArgs(rest), " ")
		if i := strings.LastIndex(name, "keyed."); i >= 0 {
			name = name[:i] + name[i+len("keyed."):]
		}
		names[name] = true
	}
	return names
}

// stripTypeArgs drops every bracketed type argument list from s.
func stripTypeArgs(s string) string {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '[':
			depth++
		case r == ']':
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}
