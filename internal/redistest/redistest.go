// Package redistest gives tests real Redis servers: the shared ones that
// `make test` starts (scripts/redis.sh), and private ones a test starts, and
// may kill, pause or restart by PID. Among the shared ones, a master with a
// replica watched by Sentinels and a Cluster whose masters have replicas are
// there to fail over: a test may kill or pause one of their servers
// (FindShared) and waits until the topology is healthy again before it ends
// (WaitSentinel, WaitCluster), as other tests use them after it.
//
// A test that needs Redis is skipped when no server is configured, unless
// the CI environment variable is set: under CI it fails instead, so a CI run
// cannot pass by skipping.
package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Environment variables the test scripts set.
const (
	EnvAddr    = "HYBRIDLIMIT_REDIS_ADDR"          // host:port of a single server
	EnvCluster = "HYBRIDLIMIT_REDIS_CLUSTER_ADDRS" // comma-separated masters of a Cluster

	// The failover topologies: a master with a replica and three Sentinels,
	// and a Cluster whose masters have a replica each.
	EnvSentinel        = "HYBRIDLIMIT_REDIS_SENTINEL_ADDRS"         // comma-separated Sentinels
	EnvSentinelMaster  = "HYBRIDLIMIT_REDIS_SENTINEL_MASTER"        // the master's name at the Sentinels
	EnvClusterReplicas = "HYBRIDLIMIT_REDIS_CLUSTER_REPLICAS_ADDRS" // comma-separated masters, as started
	EnvRun             = "HYBRIDLIMIT_REDIS_RUN"                    // scripts/redis.sh's .run directory
)

// missing skips t, or fails it under CI.
func missing(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not set, and CI is: tests that need Redis must run (make test starts it)", what)
	}
	t.Skipf("%s is not set: run make test, which starts Redis", what)
}

// Addr returns the shared single server's address.
func Addr(t testing.TB) string {
	t.Helper()
	a := os.Getenv(EnvAddr)
	if a == "" {
		missing(t, EnvAddr)
	}
	return a
}

// ClusterAddrs returns the shared Cluster's master addresses.
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	a := os.Getenv(EnvCluster)
	if a == "" {
		missing(t, EnvCluster)
	}
	return strings.Split(a, ",")
}

// Options are the client options tests use: deadlines bound every call.
func Options(addr string) *redis.Options {
	return &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second}
}

// Client returns a client of the server at addr, closed when t ends.
func Client(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(Options(addr))
	t.Cleanup(func() { c.Close() })
	return c
}

// ClusterClient returns a client of the Cluster, closed when t ends.
func ClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// Prefix returns a key prefix unique to this test run: packages run in
// parallel against the same servers, so tests never flush them and keep to
// their own keys instead.
func Prefix(t testing.TB) string {
	b := make([]byte, 6)
	rand.Read(b)
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	return "t-" + name + "-" + hex.EncodeToString(b)
}

// Server is a private redis-server a test started. Its methods act on the
// process by PID.
type Server struct {
	Addr string
	t    testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
	args []string
}

// Start starts a private redis-server on a free loopback port, persistence
// off, and stops it when t ends. Extra arguments are passed to redis-server.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		missing(t, "redis-server on PATH")
	}
	s := &Server{t: t, port: freePort(t), dir: t.TempDir()}
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.port)
	s.args = append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--protected-mode", "no",
	}, extra...)
	s.start(bin)
	t.Cleanup(s.Stop)
	return s
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *Server) start(bin string) {
	s.t.Helper()
	s.cmd = exec.Command(bin, s.args...)
	s.cmd.Stdout = &lineLog{}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: redis-server on %s not answering: %v\n%s", s.Addr, err, s.cmd.Stdout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PID returns the server's process ID.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Pause stops the process (SIGSTOP): connections stay open, nothing answers.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// Kill kills the process (SIGKILL) and waits for it: connections are reset
// and new ones refused.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	s.signal(syscall.SIGCONT)
	s.signal(syscall.SIGKILL)
	s.cmd.Wait()
	s.cmd = nil
}

// Restart kills the server if it runs and starts it again, empty, on the
// same port: a restart, as after a crash without persistence.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	bin, _ := exec.LookPath("redis-server")
	s.start(bin)
}

// Stop terminates the server (SIGTERM, then SIGKILL) and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.signal(syscall.SIGCONT)
	s.signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.signal(syscall.SIGKILL)
		<-done
	}
	s.cmd = nil
}

func (s *Server) signal(sig syscall.Signal) {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(sig)
	}
}

// lineLog keeps the last lines a server printed, for failure messages.
type lineLog struct{ lines []string }

func (l *lineLog) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(string(p)))
	for sc.Scan() {
		l.lines = append(l.lines, sc.Text())
		if len(l.lines) > 20 {
			l.lines = l.lines[1:]
		}
	}
	return len(p), nil
}

func (l *lineLog) String() string { return strings.Join(l.lines, "\n") }

// Exec is a path for programs a test starts as separate processes (its own
// binary, re-executed): filepath of os.Args[0], absolute.
func Exec() string {
	p, err := filepath.Abs(os.Args[0])
	if err != nil {
		return os.Args[0]
	}
	return p
}

// Keys returns the keys under prefix on every master of c (a *redis.Client
// or *redis.ClusterClient), by SCAN.
func Keys(ctx context.Context, c redis.UniversalClient, prefix string) ([]string, error) {
	var keys []string
	scan := func(ctx context.Context, n *redis.Client) error {
		it := n.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		return it.Err()
	}
	switch c := c.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex // ForEachMaster runs the masters concurrently
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, n)
		})
		return keys, err
	case *redis.Client:
		return keys, scan(ctx, c)
	}
	return nil, fmt.Errorf("redistest: Keys: unsupported client %T", c)
}
