package httplimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// TestClientIP resolves client addresses from peers and forwarding headers.
func TestClientIP(t *testing.T) {
	l := newLimiter(t, clocktest.New(t0))
	for _, tc := range []struct {
		name   string
		cfg    httplimit.Config
		peer   string
		header []string // "Name: value"
		want   string
	}{
		{"peer", httplimit.Config{}, "203.0.113.7:5000", nil, "203.0.113.7"},
		{"direct client forges XFF", httplimit.Config{}, "203.0.113.7:5000", []string{"X-Forwarded-For: 1.2.3.4"}, "203.0.113.7"},
		{"direct client forges X-Real-IP", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}, ClientIPHeader: "X-Real-IP"},
			"203.0.113.7:5000", []string{"X-Real-IP: 1.2.3.4"}, "203.0.113.7"},
		{"untrusted peer with XFF", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}}, "203.0.113.7:5000", []string{"X-Forwarded-For: 1.2.3.4"}, "203.0.113.7"},
		{"trusted proxy", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}}, "10.0.0.1:5000", []string{"X-Forwarded-For: 198.51.100.9"}, "198.51.100.9"},
		{"forged leftmost behind a trusted proxy", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}},
			"10.0.0.1:5000", []string{"X-Forwarded-For: 1.2.3.4, 198.51.100.9"}, "198.51.100.9"},
		{"two trusted proxies", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}},
			"10.0.0.1:5000", []string{"X-Forwarded-For: 1.2.3.4, 198.51.100.9, 10.1.1.1"}, "198.51.100.9"},
		{"XFF over several lines", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}},
			"10.0.0.1:5000", []string{"X-Forwarded-For: 1.2.3.4", "X-Forwarded-For: 198.51.100.9", "X-Forwarded-For: 10.1.1.1"}, "198.51.100.9"},
		{"every hop trusted", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}},
			"10.0.0.1:5000", []string{"X-Forwarded-For: 10.2.2.2, 10.1.1.1"}, "10.2.2.2"},
		{"garbage from the client", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}},
			"10.0.0.1:5000", []string{"X-Forwarded-For: 198.51.100.9, nonsense, 10.1.1.1"}, "10.1.1.1"},
		{"no XFF from a trusted proxy", httplimit.Config{TrustedProxies: []string{"10.0.0.1"}}, "10.0.0.1:5000", nil, "10.0.0.1"},
		{"entry with a port", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}},
			"10.0.0.1:5000", []string{"X-Forwarded-For: [2001:db8::1]:443"}, "2001:db8::1"},
		{"one hop", httplimit.Config{TrustedHops: 1}, "192.0.2.1:5000", []string{"X-Forwarded-For: 1.2.3.4, 198.51.100.9"}, "198.51.100.9"},
		{"two hops", httplimit.Config{TrustedHops: 2}, "192.0.2.1:5000", []string{"X-Forwarded-For: 1.2.3.4, 198.51.100.9, 192.0.2.2"}, "198.51.100.9"},
		{"fewer entries than hops", httplimit.Config{TrustedHops: 3}, "192.0.2.1:5000", []string{"X-Forwarded-For: 198.51.100.9"}, "192.0.2.1"},
		{"header from a trusted proxy", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}, ClientIPHeader: "CF-Connecting-IP"},
			"10.0.0.1:5000", []string{"Cf-Connecting-Ip: 198.51.100.9", "X-Forwarded-For: 1.2.3.4"}, "198.51.100.9"},
		{"bad header from a trusted proxy", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}, ClientIPHeader: "X-Real-IP"},
			"10.0.0.1:5000", []string{"X-Real-IP: x", "X-Forwarded-For: 198.51.100.9"}, "198.51.100.9"},
		{"two header lines are not believed", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}, ClientIPHeader: "X-Real-IP"},
			"10.0.0.1:5000", []string{"X-Real-IP: 1.2.3.4", "X-Real-IP: 198.51.100.8", "X-Forwarded-For: 198.51.100.9"}, "198.51.100.9"},
		{"IPv6 peer", httplimit.Config{}, "[2001:db8::5]:5000", nil, "2001:db8::5"},
		{"IPv4-mapped peer", httplimit.Config{}, "[::ffff:192.0.2.3]:5000", nil, "192.0.2.3"},
		{"IPv4-mapped proxy", httplimit.Config{TrustedProxies: []string{"::ffff:10.0.0.0/104"}},
			"[::ffff:10.0.0.1]:5000", []string{"X-Forwarded-For: 198.51.100.9"}, "198.51.100.9"},
		{"unix socket", httplimit.Config{}, "@", nil, "invalid IP"},
		{"zoned peer", httplimit.Config{}, "[fe80::1%eth0]:5000", nil, "fe80::1"},
		{"zoned proxy is trusted", httplimit.Config{TrustedProxies: []string{"fe80::/10"}},
			"[fe80::1%eth0]:5000", []string{"X-Forwarded-For: 198.51.100.9"}, "198.51.100.9"},
		{"zoned XFF entry", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}},
			"10.0.0.1:5000", []string{"X-Forwarded-For: fe80::2%25en0"}, "fe80::2"},
		{"zoned XFF entry with a port", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}},
			"10.0.0.1:5000", []string{"X-Forwarded-For: [fe80::2%eth1]:443"}, "fe80::2"},
		{"zoned header", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}, ClientIPHeader: "X-Real-IP"},
			"10.0.0.1:5000", []string{"X-Real-IP: fe80::3%wlan0"}, "fe80::3"},
		{"zoned hop", httplimit.Config{TrustedHops: 1}, "192.0.2.1:5000", []string{"X-Forwarded-For: fe80::4%1"}, "fe80::4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := httplimit.New(l, tc.cfg)
			require.NoError(t, err)
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.peer
			for _, h := range tc.header {
				name, value, _ := cutHeader(h)
				r.Header.Add(name, value)
			}
			assert.Equal(t, tc.want, m.ClientIP(r).String())
		})
	}
}

func cutHeader(h string) (string, string, bool) {
	for i := range len(h) {
		if h[i] == ':' {
			v := h[i+1:]
			for len(v) > 0 && v[0] == ' ' {
				v = v[1:]
			}
			return h[:i], v, true
		}
	}
	return h, "", false
}

// TestSpoofing: through a real listener, forged forwarding headers do not
// give a client a fresh budget.
func TestSpoofing(t *testing.T) {
	l := newLimiter(t, clocktest.New(t0))
	echo := func(m *httplimit.Middleware) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, m.ClientIP(r).String()) })
	}

	// A direct client: XFF is not read at all.
	direct, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{perIP("direct", "/", 3, time.Minute)}})
	require.NoError(t, err)
	ts := serve(t, direct, echo(direct))
	codes := []int{}
	for i := range 5 {
		resp, body := get(t, ts, "/", "X-Forwarded-For: 198.51.100."+strconv.Itoa(i), "X-Real-IP: 198.51.100."+strconv.Itoa(i))
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusOK {
			assert.Equal(t, "127.0.0.1", body)
		}
	}
	assert.Equal(t, []int{200, 200, 200, 429, 429}, codes, "a forged XFF changes nothing")

	// Behind a trusted proxy (this test's client, on loopback), which
	// appends the address it saw: forging the leftmost entry changes nothing.
	proxied, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{perIP("proxied", "/", 3, time.Minute)}, TrustedProxies: []string{"127.0.0.0/8", "::1"}})
	require.NoError(t, err)
	ts = serve(t, proxied, echo(proxied))
	codes = codes[:0]
	for i := range 5 {
		resp, body := get(t, ts, "/", "X-Forwarded-For: 203.0.113."+strconv.Itoa(i)+", 198.51.100.20")
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusOK {
			assert.Equal(t, "198.51.100.20", body)
		}
	}
	assert.Equal(t, []int{200, 200, 200, 429, 429}, codes, "a forged leftmost entry changes nothing")
	resp, body := get(t, ts, "/", "X-Forwarded-For: 198.51.100.21")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "another client behind the proxy has its own budget")
	assert.Equal(t, "198.51.100.21", body)
}

// TestIPv6Prefix: grouped IPv6 clients share a budget; IPv4 ones do not.
func TestIPv6Prefix(t *testing.T) {
	l := newLimiter(t, clocktest.New(t0))
	m, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{perIP("v6", "/", 2, time.Minute)}, TrustedProxies: []string{"127.0.0.1"}, IPv6Prefix: 64})
	require.NoError(t, err)
	ts := serve(t, m, okHandler)
	codes := []int{}
	for _, ip := range []string{"2001:db8:1:2::1", "2001:db8:1:2:ffff::9", "2001:db8:1:2::3", "2001:db8:1:3::1", "192.0.2.1", "192.0.2.2", "192.0.2.2"} {
		resp, _ := get(t, ts, "/", "X-Forwarded-For: "+ip)
		codes = append(codes, resp.StatusCode)
	}
	assert.Equal(t, []int{200, 200, 429, 200, 200, 200, 200}, codes)
}

// TestCanonicalKeys: one client written several ways is one key, its
// IPv6 zone dropped (a zone names the receiver's interface, which the
// sender may vary), in the peer address and in X-Forwarded-For.
func TestCanonicalKeys(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   httplimit.Config
		peers []string // RemoteAddr, or "peer|X-Forwarded-For"
		want  []int
	}{
		{"IPv4 and mapped", httplimit.Config{}, []string{"192.0.2.3:1", "[::ffff:192.0.2.3]:2", "[::ffff:c000:203]:3"}, []int{200, 200, 429}},
		{"IPv6 spellings", httplimit.Config{}, []string{"[2001:db8::1]:1", "[2001:DB8:0::1]:2", "[2001:db8:0:0::1]:3"}, []int{200, 200, 429}},
		{"zoned peers", httplimit.Config{}, []string{"[fe80::1%eth0]:1", "[fe80::1%eth1]:2", "[fe80::1]:3", "[fe80::1%25x]:4"}, []int{200, 200, 429, 429}},
		{"zoned forwarded", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}},
			[]string{"10.0.0.1:1|fe80::9%a", "10.0.0.1:1|fe80::9%b", "10.0.0.1:1|[fe80::9%c]:80", "10.0.0.1:1|fe80::9"}, []int{200, 200, 429, 429}},
		{"zoned and grouped", httplimit.Config{IPv6Prefix: 64}, []string{"[fe80::1%eth0]:1", "[fe80::2%eth1]:2", "[fe80::3]:3"}, []int{200, 200, 429}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Rules = []httplimit.Rule{perIP("ip", "/", 2, time.Minute)}
			m, err := httplimit.New(newLimiter(t, clocktest.New(t0)), tc.cfg)
			require.NoError(t, err)
			h := m.Handler(okHandler)
			codes := []int{}
			for _, peer := range tc.peers {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				var xff string
				r.RemoteAddr, xff, _ = strings.Cut(peer, "|")
				if xff != "" {
					r.Header.Set("X-Forwarded-For", xff)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				codes = append(codes, w.Code)
			}
			assert.Equal(t, tc.want, codes)
		})
	}
}
