package clientip

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

// ipv4Cases are addresses parseIPv4 must parse as netip.ParseAddr does,
// and text it must leave to ParseAddr.
var ipv4Cases = []string{
	"1.2.3.4", "0.0.0.0", "255.255.255.255", "10.0.0.1", "192.0.2.100",
	"256.0.0.1", "1.2.3.256", "01.2.3.4", "1.2.3.00", "1.2.3", "1.2.3.4.5",
	"1..2.3", ".1.2.3", "1.2.3.", "", ".", "1.2.3.4:80", "::1", "::ffff:1.2.3.4",
	"1.2.3.-4", "1.2.3.4 ", "a.b.c.d", "1.2.3.1000", "99999999999.1.1.1",
}

// TestParseIPv4 checks that parseIPv4 accepts exactly the IPv4 text
// netip.ParseAddr does, with the same address.
func TestParseIPv4(t *testing.T) {
	for _, s := range ipv4Cases {
		checkParseIPv4(t, s)
	}
}

func FuzzParseIPv4(f *testing.F) {
	for _, s := range ipv4Cases {
		f.Add(s)
	}
	f.Fuzz(checkParseIPv4)
}

func checkParseIPv4(t *testing.T, s string) {
	got, ok := parseIPv4(s)
	want, err := netip.ParseAddr(s)
	if assert.Equal(t, err == nil && want.Is4(), ok, "%q: parsed", s) && ok {
		assert.Equal(t, want, got, "%q", s)
	}
}
