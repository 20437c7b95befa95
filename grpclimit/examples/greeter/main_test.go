package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGreeter: the greeter serves 3 calls of a client in 10 s and refuses
// the 4th with ResourceExhausted, its RetryInfo and QuotaFailure printed.
func TestGreeter(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, lis, "rules.yaml", "") }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	var out bytes.Buffer
	require.NoError(t, callHello(t.Context(), &out, lis.Addr().String(), "alice", "", 4))
	s := out.String()
	assert.Equal(t, 3, strings.Count(s, `"Hello, alice"`), s)
	assert.Equal(t, 1, strings.Count(s, "Code: ResourceExhausted"), s)
	for _, want := range []string{
		`ratelimit-policy: "greeter-ip";q=3;w=10`,
		`ratelimit: "greeter-ip";r=0;t=`,
		`"@type": "type.googleapis.com/google.rpc.RetryInfo"`,
		`"@type": "type.googleapis.com/google.rpc.QuotaFailure"`,
		`"quotaId": "greeter-ip"`,
	} {
		assert.Contains(t, s, want)
	}
}
