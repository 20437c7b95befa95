package syncer

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestScriptParts: every script is exactly its parts in order, the files as
// they are in lua/ and the lines as scripts.go holds them, and every part
// is in some script.
func TestScriptParts(t *testing.T) {
	require.Len(t, layouts, len(scripts), "a script not made by compose, or one preload does not load")
	used := map[string]bool{}
	for _, s := range scripts {
		names, ok := layouts[s]
		require.True(t, ok, "a script preload loads was not made by compose")
		var src strings.Builder
		for _, n := range names {
			used[n] = true
			if l, ok := lines[n]; ok {
				src.WriteString(l)
				continue
			}
			b, err := os.ReadFile(filepath.Join("lua", n+".lua"))
			require.NoError(t, err, "part %s", n)
			src.WriteString(string(b))
		}
		sum := sha1.Sum([]byte(src.String()))
		assert.Equal(t, hex.EncodeToString(sum[:]), s.Hash(), "the script of %v is not its parts in order", names)
	}
	files, err := filepath.Glob(filepath.Join("lua", "*.lua"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		n := strings.TrimSuffix(filepath.Base(f), ".lua")
		assert.True(t, used[n], "lua/%s.lua is in no script", n)
		_, shadowed := lines[n]
		assert.False(t, shadowed, "a line and a file are both named %s", n)
	}
	for n := range lines {
		assert.True(t, used[n], "the line %s is in no script", n)
	}
}

// luaComment is a Lua comment to the end of its line (the scripts hold no
// "--" in a string).
var luaComment = regexp.MustCompile(`--.*`)

// code returns Lua source without its comments.
func code(src string) string { return luaComment.ReplaceAllString(src, "") }

// TestBucketForms: the buckets' decision, written once (lua/bucket.lua),
// is run flat by the single-rule script, answering in place, and as the
// body of decide_bucket by the multi-rule and refund scripts, answering a
// table: every script holding it gives it its inputs and an answer first.
func TestBucketForms(t *testing.T) {
	body := code(part("bucket"))
	assert.Equal(t, 2, strings.Count(body, "return "), "the decision's returns")
	assert.Equal(t, strings.Count(body, "return "), strings.Count(body, "return answer(form, "),
		"a return of the decision that is not answer(form, ...): the scripts would answer it in different forms")
	assert.NotRegexp(t, `local (function )?(answer|form)\b`, body, "the decision defines answer or form itself")

	// The single-rule script is a flat chunk: creating a function per call
	// costs Redis measurably on its hottest path.
	var single strings.Builder
	for _, n := range layouts[scriptBucket] {
		single.WriteString(code(part(n)))
	}
	assert.False(t, strings.Contains(single.String(), "function"), "the single-rule bucket script creates a function per call")

	held := 0
	for s, names := range layouts {
		i := slices.Index(names, "bucket")
		if i < 0 {
			continue
		}
		held++
		before := names[:i]
		flat := slices.Contains(before, "bucket_args")
		wrapped := i > 0 && names[i-1] == "bucket_begin" && i+1 < len(names) && names[i+1] == "bucket_end"
		assert.True(t, flat != wrapped, "%v: the decision is neither flat after bucket_args nor wrapped by bucket_begin and bucket_end", names)
		answers := 0
		for _, n := range before {
			if n == "answer_packed" || n == "answer_table" {
				answers++
			}
		}
		assert.Equal(t, 1, answers, "%v: answer parts before the decision", names)
		if s == scriptBucket {
			assert.True(t, flat, "the single-rule bucket script is not flat")
			assert.Contains(t, before, "answer_packed", "the single-rule bucket script does not pack its answer")
		}
	}
	assert.Equal(t, 3, held, "scripts holding the buckets' decision: single-rule, multi-rule, refund")
}
