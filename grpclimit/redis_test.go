package grpclimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"

	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// redisLimiter returns a Limiter on the Redis server at addr whose rules
// run in mode, under prefix, closed when t ends.
func redisLimiter(t *testing.T, addr, prefix string, mode hybrid.Mode) *hybrid.Limiter {
	t.Helper()
	l, err := hybrid.New(hybrid.Config{
		Redis:    redistest.Client(t, addr),
		Keyspace: hybrid.Keyspace{Prefix: prefix},
		Mode:     mode,
		Timeout:  300 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// TestCentralShared: two servers whose Interceptors share a Central rule
// through Redis admit the limit between them, not each.
func TestCentralShared(t *testing.T) {
	addr, prefix := redistest.Addr(t), redistest.Prefix(t)
	rules := []httplimit.Rule{ipRule("shared", "/*", 4, time.Minute)}
	var clients []*client
	for range 2 {
		ic, err := grpclimit.New(redisLimiter(t, addr, prefix, hybrid.Central), grpclimit.Config{Rules: rules})
		require.NoError(t, err)
		clients = append(clients, serve(t, ic))
	}
	ok := 0
	for range 3 {
		for _, c := range clients {
			if c.empty(t).st.Code() == codes.OK {
				ok++
			}
		}
	}
	assert.Equal(t, 4, ok, "the limit, across both servers")
}

// TestRedisKilled: with Redis killed, a FailClosed rule refuses with
// Unavailable (an ErrorInfo naming it, a RetryInfo, no figures of a limit
// no one checked) and a FailOpen rule admits.
func TestRedisKilled(t *testing.T) {
	srv := redistest.Start(t)
	rule := func(id, endpoint string, p hybrid.Policy) httplimit.Rule {
		r := ipRule(id, endpoint, 3, time.Minute)
		r.Policy = p
		return r
	}
	ic, err := grpclimit.New(redisLimiter(t, srv.Addr, redistest.Prefix(t), hybrid.Central), grpclimit.Config{Rules: []httplimit.Rule{
		rule("closed", mEmpty, hybrid.FailClosed),
		rule("open", mUnary, hybrid.FailOpen),
	}})
	require.NoError(t, err)
	c := serve(t, ic)
	r := c.empty(t)
	require.Equal(t, codes.OK, r.st.Code())
	require.Len(t, r.header.Get("ratelimit"), 1)
	require.True(t, strings.HasPrefix(r.header.Get("ratelimit")[0], `"closed";r=2;t=`), r.header) // t: the wall clock's window
	require.Equal(t, codes.OK, c.unary(t).st.Code())

	srv.Kill()
	for range 3 {
		r := c.empty(t)
		require.Equal(t, codes.Unavailable, r.st.Code(), r.st.Message())
		var info *errdetails.ErrorInfo
		var retry *errdetails.RetryInfo
		for _, d := range r.st.Details() {
			switch d := d.(type) {
			case *errdetails.ErrorInfo:
				info = d
			case *errdetails.RetryInfo:
				retry = d
			case *errdetails.QuotaFailure:
				t.Errorf("a QuotaFailure, but no quota was checked: %v", d)
			}
		}
		require.NotNil(t, info)
		assert.Equal(t, "RATE_LIMITER_UNAVAILABLE", info.Reason)
		assert.Equal(t, "hybridlimit", info.Domain)
		assert.Equal(t, "closed", info.Metadata["rules"])
		require.NotNil(t, retry)
		assert.GreaterOrEqual(t, retry.RetryDelay.AsDuration(), time.Second, "not an immediate retry against a Redis that is down")
		assert.Empty(t, r.header.Get("ratelimit"), "no figures")

		assert.Equal(t, codes.OK, c.unary(t).st.Code(), "FailOpen admits")
	}
}

// TestRulesInRedis: rules published to Redis (httplimit.PublishRules) are
// applied by WatchRedis through SetRules, and a new version changes them.
func TestRulesInRedis(t *testing.T) {
	addr, prefix := redistest.Addr(t), redistest.Prefix(t)
	rc := redistest.Client(t, addr)
	ks := hybrid.Keyspace{Prefix: prefix}
	_, err := httplimit.PublishRules(t.Context(), rc, ks, []httplimit.Rule{ipRule("r", "/grpc.testing.TestService/*", 1, time.Minute)})
	require.NoError(t, err)
	ic, err := grpclimit.New(redisLimiter(t, addr, prefix, hybrid.Local), grpclimit.Config{})
	require.NoError(t, err)
	c := serve(t, ic)
	applied := make(chan int, 4)
	w, err := httplimit.WatchRedis(t.Context(), rc, ks, func(r []httplimit.Rule) error {
		err := ic.SetRules(r)
		if err == nil {
			applied <- len(r)
		}
		return err
	}, httplimit.WatchConfig{PollInterval: 50 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	require.Equal(t, 1, <-applied)
	require.Equal(t, codes.OK, c.empty(t).st.Code())
	require.Equal(t, codes.ResourceExhausted, c.empty(t).st.Code())

	_, err = httplimit.PublishRules(t.Context(), rc, ks, []httplimit.Rule{ipRule("r", "/grpc.testing.TestService/*", 3, time.Minute)})
	require.NoError(t, err)
	select {
	case <-applied:
	case <-time.After(10 * time.Second):
		t.Fatal("the new version was not applied")
	}
	ok, _ := countOK(3, func() result { return c.empty(t) })
	assert.Equal(t, 2, ok, "3 a minute now, one used")
}
