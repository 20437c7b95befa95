package redisproc

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPortTaken: a server started on a port another server holds does not
// take that one for its own: the start fails with errPortLost at once, and
// startServer moves to another port.
func TestPortTaken(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server")
	}
	a, err := Start(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(a.Kill)
	b := &Redis{Addr: a.Addr, bin: a.bin, args: append([]string(nil), a.args...)}
	b.args[len(b.args)-3] = t.TempDir() // its own --dir
	err = b.start()
	assert.ErrorIs(t, err, errPortLost, "another server answers on the port")
	assert.Zero(t, b.PID(), "the process that lost the port is gone")

	c, err := startServer(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(c.Kill)
	assert.NotEqual(t, a.Addr, c.Addr)
	assert.NoError(t, answering(c.cmd, c.Addr, 0), "it answers as itself")
}
