package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel returns the shared Sentinels' addresses and the name of the
// master they watch (a master with one replica).
func Sentinel(t testing.TB) (addrs []string, master string) {
	t.Helper()
	a, m := os.Getenv(EnvSentinel), os.Getenv(EnvSentinelMaster)
	if a == "" {
		missing(t, EnvSentinel)
	}
	if m == "" {
		missing(t, EnvSentinelMaster)
	}
	return strings.Split(a, ","), m
}

// ReplicatedCluster returns the addresses of the shared Cluster whose masters
// have a replica each: its masters as they were at start. After a failover
// some of them are replicas, which still serve a cluster client as seeds.
func ReplicatedCluster(t testing.TB) []string {
	t.Helper()
	a := os.Getenv(EnvClusterReplicas)
	if a == "" {
		missing(t, EnvClusterReplicas)
	}
	return strings.Split(a, ",")
}

// Shared is a server of the shared topologies that scripts/redis.sh started
// and recorded under its .run directory. Its methods signal the process by
// PID. Not safe for concurrent use.
type Shared struct {
	Addr string
	PID  int

	t      testing.TB
	dir    string // .run/<name>, where the script recorded it
	paused bool
	killed bool
}

// FindShared returns the shared server at addr. Its PID (INFO server's
// process_id) must be the one scripts/redis.sh recorded for that port in this
// checkout's .run, so a test never signals a server it does not own. When t
// ends, a server left paused is resumed and one left killed is restarted.
func FindShared(t testing.TB, addr string) *Shared {
	t.Helper()
	run := runDir(t)
	_, port, err := splitAddr(addr)
	if err != nil {
		t.Fatalf("redistest: FindShared(%q): %v", addr, err)
	}
	dirs, _ := filepath.Glob(filepath.Join(run, "*", "port"))
	s := &Shared{Addr: addr, t: t}
	for _, f := range dirs {
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == port {
			s.dir = filepath.Dir(f)
			break
		}
	}
	if s.dir == "" {
		t.Fatalf("redistest: no server of port %s is recorded under %s", port, run)
	}
	recorded, err := readPID(s.dir)
	if err != nil {
		t.Fatalf("redistest: %s: %v", s.dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.PID, err = ServerPID(ctx, addr)
	if err != nil {
		t.Fatalf("redistest: FindShared(%q): %v", addr, err)
	}
	if s.PID != recorded {
		t.Fatalf("redistest: %s answers with pid %d, but %s records pid %d", addr, s.PID, s.dir, recorded)
	}
	t.Cleanup(func() {
		if s.paused {
			s.Resume()
		}
		if s.killed {
			s.Restart()
		}
	})
	return s
}

// ServerPID returns the process ID of the server at addr (INFO server's
// process_id): a server of this machine, as every test server is.
func ServerPID(ctx context.Context, addr string) (int, error) {
	c := redis.NewClient(Options(addr))
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	v, ok := infoField(info, "process_id")
	if !ok {
		return 0, fmt.Errorf("redistest: INFO server of %s has no process_id", addr)
	}
	return strconv.Atoi(v)
}

// Pause stops the process (SIGSTOP): connections stay open, nothing answers,
// and the rest of the topology sees it fail after its timeout.
func (s *Shared) Pause() {
	s.signal(syscall.SIGSTOP)
	s.paused = true
}

// Resume continues a paused process (SIGCONT).
func (s *Shared) Resume() {
	s.signal(syscall.SIGCONT)
	s.paused = false
}

// Kill kills the process (SIGKILL) and waits until it is gone: its data is
// lost, as persistence is off.
func (s *Shared) Kill() {
	s.t.Helper()
	s.signal(syscall.SIGCONT)
	s.signal(syscall.SIGKILL)
	s.paused, s.killed = false, true
	// Not our child: its parent (init, or a subreaper) reaps it.
	deadline := time.Now().Add(5 * time.Second)
	for !gone(s.PID) {
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: pid %d (%s) still alive 5 s after SIGKILL", s.PID, s.Addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart starts a killed server again with the command line it was started
// with, on its port (scripts/redis.sh restart), and waits until it answers.
// It comes back empty; a cluster node reads its nodes.conf and a Sentinel its
// config, so each rejoins as what the topology now says it is.
func (s *Shared) Restart() {
	s.t.Helper()
	run := filepath.Dir(s.dir)
	script := filepath.Join(filepath.Dir(run), "scripts", "redis.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script, "restart", filepath.Base(s.dir))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		s.t.Fatalf("redistest: restarting %s: %v\n%s", s.Addr, err, stderr.String())
	}
	// The script prints "<addr> <pid>".
	f := strings.Fields(string(out))
	if len(f) != 2 {
		s.t.Fatalf("redistest: restarting %s: unexpected output %q", s.Addr, out)
	}
	if s.PID, err = strconv.Atoi(f[1]); err != nil {
		s.t.Fatalf("redistest: restarting %s: unexpected output %q", s.Addr, out)
	}
	s.killed = false
}

func (s *Shared) signal(sig syscall.Signal) {
	if err := syscall.Kill(s.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.t.Errorf("redistest: signal %v to pid %d (%s): %v", sig, s.PID, s.Addr, err)
	}
}

// gone reports whether pid has exited (an exited process not yet reaped is a
// zombie, state Z in /proc).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

func readPID(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "redis.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// runDir returns scripts/redis.sh's .run directory: EnvRun, or .run at the
// root of the module, found by walking up from the working directory.
func runDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv(EnvRun); d != "" {
		return d
	}
	const module = "module github.com/hybridlimit/hybridlimit"
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			if line, _, _ := strings.Cut(string(b), "\n"); strings.TrimSpace(line) == module {
				return filepath.Join(dir, ".run")
			}
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatalf("redistest: %s is not set and no go.mod of github.com/hybridlimit/hybridlimit is above the working directory", EnvRun)
		}
		dir = up
	}
}

func splitAddr(addr string) (host, port string, err error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", "", fmt.Errorf("no port in %q", addr)
	}
	return addr[:i], addr[i+1:], nil
}

// infoField returns the value of field in an INFO reply.
func infoField(info, field string) (string, bool) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok && k == field {
			return v, true
		}
	}
	return "", false
}

// waitFor calls check until it returns nil, every 100 ms for at most within;
// it fails t with what check said last.
func waitFor(t testing.TB, within time.Duration, what string, check func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := check(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s not within %v: %v", what, within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitSentinel waits, for at most within, until the Sentinel topology is
// healthy: every Sentinel names the same master, sees it up as a master, knows
// the other Sentinels and at least one replica, and sees every replica it
// knows up and linked; the master itself has every replica online. It
// returns the master's address, and fails t if that does not happen in time.
func WaitSentinel(t testing.TB, sentinels []string, name string, within time.Duration) string {
	t.Helper()
	var master string
	waitFor(t, within, "Sentinel topology "+name+" healthy", func(ctx context.Context) error {
		m, err := sentinelHealthy(ctx, sentinels, name)
		master = m
		return err
	})
	return master
}

func sentinelHealthy(ctx context.Context, sentinels []string, name string) (string, error) {
	var master string
	for _, addr := range sentinels {
		sc := redis.NewSentinelClient(Options(addr))
		m, err := sc.Master(ctx, name).Result()
		if err != nil {
			sc.Close()
			return "", fmt.Errorf("Sentinel %s: SENTINEL MASTER: %w", addr, err)
		}
		replicas, err := sc.Replicas(ctx, name).Result()
		sc.Close()
		if err != nil {
			return "", fmt.Errorf("Sentinel %s: SENTINEL REPLICAS: %w", addr, err)
		}
		at := m["ip"] + ":" + m["port"]
		switch {
		case master == "":
			master = at
		case at != master:
			return "", fmt.Errorf("Sentinel %s names master %s, another names %s", addr, at, master)
		}
		if m["flags"] != "master" {
			return "", fmt.Errorf("Sentinel %s: master %s has flags %s", addr, at, m["flags"])
		}
		if want := strconv.Itoa(len(sentinels) - 1); m["num-other-sentinels"] != want {
			return "", fmt.Errorf("Sentinel %s knows %s other Sentinels, not %s", addr, m["num-other-sentinels"], want)
		}
		if len(replicas) == 0 {
			return "", fmt.Errorf("Sentinel %s knows no replica of %s", addr, at)
		}
		for _, r := range replicas {
			if r["flags"] != "slave" || r["master-link-status"] != "ok" {
				return "", fmt.Errorf("Sentinel %s: replica %s:%s has flags %s, master link %s",
					addr, r["ip"], r["port"], r["flags"], r["master-link-status"])
			}
		}
	}
	return master, replicated(ctx, master)
}

// replicated checks that the server at addr is a master with at least one
// replica and every replica online.
func replicated(ctx context.Context, addr string) error {
	c := redis.NewClient(Options(addr))
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("master %s: %w", addr, err)
	}
	if role, _ := infoField(info, "role"); role != "master" {
		return fmt.Errorf("%s has role %s, not master", addr, role)
	}
	n, _ := infoField(info, "connected_slaves")
	k, _ := strconv.Atoi(n)
	if k == 0 {
		return fmt.Errorf("master %s has no replica connected", addr)
	}
	for i := range k {
		if v, _ := infoField(info, "slave"+strconv.Itoa(i)); !strings.Contains(v, "state=online") {
			return fmt.Errorf("master %s: replica %s", addr, v)
		}
	}
	return nil
}

// WaitCluster waits, for at most within, until the Cluster that addrs seed is
// healthy: every node it knows answers and says cluster_state:ok, no node
// flags another failing, and every master that serves slots has a replica
// whose link to it is up. It fails t if that does not happen in time.
func WaitCluster(t testing.TB, addrs []string, within time.Duration) {
	t.Helper()
	waitFor(t, within, "Cluster healthy", func(ctx context.Context) error {
		return clusterHealthy(ctx, addrs)
	})
}

// clusterNode is a line of CLUSTER NODES.
type clusterNode struct {
	id, addr, flags, master string
	slots                   bool
}

func clusterNodes(ctx context.Context, addr string) ([]clusterNode, error) {
	c := redis.NewClient(Options(addr))
	defer c.Close()
	s, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES of %s: %w", addr, err)
	}
	var nodes []clusterNode
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		a, _, _ := strings.Cut(f[1], "@")
		nodes = append(nodes, clusterNode{id: f[0], addr: a, flags: f[2], master: f[3], slots: len(f) > 8})
	}
	return nodes, nil
}

func clusterHealthy(ctx context.Context, seeds []string) error {
	var known []clusterNode
	var err error
	for _, a := range seeds {
		if known, err = clusterNodes(ctx, a); err == nil {
			break
		}
	}
	if err != nil {
		return err
	}
	for _, n := range known {
		c := redis.NewClient(Options(n.addr))
		info, err := c.ClusterInfo(ctx).Result()
		c.Close()
		if err != nil {
			return fmt.Errorf("CLUSTER INFO of %s: %w", n.addr, err)
		}
		if v, _ := infoField(info, "cluster_state"); v != "ok" {
			return fmt.Errorf("%s says cluster_state:%s", n.addr, v)
		}
		if v, _ := infoField(info, "cluster_known_nodes"); v != strconv.Itoa(len(known)) {
			return fmt.Errorf("%s knows %s nodes, not %d", n.addr, v, len(known))
		}
		view, err := clusterNodes(ctx, n.addr)
		if err != nil {
			return err
		}
		for _, o := range view {
			if strings.Contains(o.flags, "fail") {
				return fmt.Errorf("%s flags %s %s", n.addr, o.addr, o.flags)
			}
		}
	}
	for _, m := range known {
		if !strings.Contains(m.flags, "master") || !m.slots {
			continue
		}
		linked := false
		for _, r := range known {
			if r.master == m.id && replicaLinked(ctx, r.addr) {
				linked = true
				break
			}
		}
		if !linked {
			return fmt.Errorf("master %s has no replica linked to it", m.addr)
		}
	}
	return nil
}

// replicaLinked reports whether the server at addr is a replica whose link to
// its master is up.
func replicaLinked(ctx context.Context, addr string) bool {
	c := redis.NewClient(Options(addr))
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return false
	}
	role, _ := infoField(info, "role")
	link, _ := infoField(info, "master_link_status")
	return role == "slave" && link == "up"
}
