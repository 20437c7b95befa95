package keyname

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/internal/config"
)

func TestCheckRule(t *testing.T) {
	for _, ok := range []string{"a", "api-user", "A_b.c:d/e-9", strings.Repeat("x", config.MaxRuleName)} {
		assert.NoError(t, CheckRule(ok), ok)
	}
	for name, want := range map[string]string{
		"": "1 to 128 bytes",
		strings.Repeat("x", config.MaxRuleName+1): "1 to 128 bytes",
		"a{b}": `byte '{' at 1`,
		"a b":  `byte ' ' at 1`,
		"é":    "only letters",
	} {
		err := CheckRule(name)
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), want, name)
			if name != "" {
				assert.NotContains(t, err.Error(), strconv.Quote(name), "the name is the caller's to quote")
			}
		}
	}
}
