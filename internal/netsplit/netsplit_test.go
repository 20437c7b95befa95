package netsplit

import (
	"io"
	"log"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCut(t *testing.T) {
	n := New()
	n.Split([]string{"a:1", "b:1"}, []string{"c:1"})
	assert.False(t, n.cut("a:1", "b:1"), "one side")
	assert.True(t, n.cut("a:1", "c:1"), "across")
	assert.True(t, n.cut("c:1", "b:1"), "across, the other way")
	assert.False(t, n.cut("a:1", "d:1"), "an address in no group")
	n.Heal()
	assert.False(t, n.cut("a:1", "c:1"), "healed")
}

// TestSplitAndHeal: two memberlist nodes on a Net each declare the other
// dead once split, and find each other again once healed and joined.
func TestSplitAndHeal(t *testing.T) {
	n := New()
	var ml []*memberlist.Memberlist
	var addrs []string
	for _, name := range []string{"a", "b"} {
		tr, err := n.Transport()
		require.NoError(t, err)
		c := memberlist.DefaultLocalConfig()
		c.Name, c.Transport, c.Logger = name, tr, log.New(io.Discard, "", 0)
		c.ProbeInterval, c.ProbeTimeout, c.SuspicionMult = 50*time.Millisecond, 25*time.Millisecond, 2
		m, err := memberlist.Create(c)
		require.NoError(t, err)
		t.Cleanup(func() { m.Shutdown() })
		ml, addrs = append(ml, m), append(addrs, tr.Addr())
	}
	_, err := ml[1].Join(addrs[:1])
	require.NoError(t, err)
	members := func(want int) func() bool {
		return func() bool { return ml[0].NumMembers() == want && ml[1].NumMembers() == want }
	}
	require.Eventually(t, members(2), 5*time.Second, 10*time.Millisecond, "joined")

	n.Split(addrs[:1], addrs[1:])
	_, err = ml[1].Join(addrs[:1])
	assert.ErrorContains(t, err, ErrCut.Error(), "a stream across the cut is refused (memberlist does not wrap errors)")
	assert.Eventually(t, members(1), 10*time.Second, 10*time.Millisecond, "each declares the other dead")

	n.Heal()
	_, err = ml[1].Join(addrs[:1])
	require.NoError(t, err)
	assert.Eventually(t, members(2), 5*time.Second, 10*time.Millisecond, "joined again")
}
