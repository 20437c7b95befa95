// Package redisproc runs redis-server processes for tests and benchmarks:
// a single server, a master with a replica behind three Sentinels, a
// Cluster with or without replicas; each killed, stopped or restarted by
// PID. Every server listens on loopback, persistence off.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// freePort returns a loopback port nothing listens on (nor on port+10000,
// a Cluster node's bus).
func freePort() (int, error) {
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if port+10000 > 65535 {
			continue
		}
		if bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000)); err == nil {
			bus.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("redisproc: no free port pair")
}

// startServer starts a redis-server in dir on a free port with extra
// arguments; Restart starts it again with the same ones (a Cluster node
// keeps its nodes.conf, and so its identity). A port another process took
// between the check and the bind is given up for another.
func startServer(dir string, extra ...string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port), bin: bin,
			args: append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "no"}, extra...)}
		err = r.start()
		if !errors.Is(err, errPortLost) || attempt == portAttempts {
			return r, err
		}
	}
}

// portAttempts is how many free ports a start tries.
const portAttempts = 5

// errPortLost: the process did not get its port (another one bound it
// first), or exited before it answered.
var errPortLost = errors.New("redisproc: the port was taken, or the process exited")

// answering waits until the process cmd answers on addr as itself (its
// process_id in INFO server, not another server that took the port), for
// up to d; errPortLost if it exits first or another answers.
func answering(cmd *exec.Cmd, addr string, d time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	pid := "process_id:" + strconv.Itoa(cmd.Process.Pid) + "\r\n"
	for deadline := time.Now().Add(d); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		switch {
		case err == nil && strings.Contains(info, pid):
			return nil
		case err == nil, exited(cmd.Process.Pid):
			return errPortLost
		case time.Now().After(deadline):
			return fmt.Errorf("redisproc: %s not answering: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exited reports whether process pid, a child not yet waited for, has
// exited (a zombie, by /proc).
func exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state …: the state follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// PID is the server's process id, 0 once killed.
func (r *Redis) PID() int {
	if r.cmd == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

// Sentinel is a master with one replica watched by three Sentinels (quorum
// 2), for failover runs: Kill the master and a Sentinel promotes the
// replica.
type Sentinel struct {
	Master    string   // the master's name, for a failover client
	Addrs     []string // the Sentinels' addresses
	Servers   []*Redis // the master first, then the replica
	sentinels []*exec.Cmd
}

// StartSentinel starts a master, its replica and three Sentinels in dir,
// and waits until the replica is in sync and each Sentinel knows the
// others.
func StartSentinel(dir string) (*Sentinel, error) {
	s := &Sentinel{Master: "outage"}
	m, err := startServer(filepath.Join(dir, "master"))
	if err != nil {
		return nil, err
	}
	s.Servers = append(s.Servers, m)
	host, port, _ := net.SplitHostPort(m.Addr)
	rp, err := startServer(filepath.Join(dir, "replica"), "--replicaof", host, port)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Servers = append(s.Servers, rp)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		s.Close()
		return nil, err
	}
	for i := range 3 {
		cmd, addr, err := startSentinel(bin, filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", i)), s.Master, host, port)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.sentinels = append(s.sentinels, cmd)
		s.Addrs = append(s.Addrs, addr)
	}
	if err := s.waitHealthy(30 * time.Second); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// startSentinel starts a Sentinel of master (at host:port) on a free
// port, its configuration in conf, and waits until it answers; a port
// another process took first is given up for another.
func startSentinel(bin, conf, master, host, port string) (*exec.Cmd, string, error) {
	for attempt := 1; ; attempt++ {
		p, err := freePort()
		if err != nil {
			return nil, "", err
		}
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\nsentinel monitor %s %s %s 2\n"+
			"sentinel down-after-milliseconds %[2]s 1000\nsentinel failover-timeout %[2]s 3000\nsentinel parallel-syncs %[2]s 1\n",
			p, master, host, port)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return nil, "", err
		}
		cmd := exec.Command(bin, conf, "--sentinel")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return nil, "", err
		}
		addr := "127.0.0.1:" + strconv.Itoa(p)
		err = answering(cmd, addr, 10*time.Second)
		if err == nil {
			return cmd, addr, nil
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if !errors.Is(err, errPortLost) || attempt == portAttempts {
			return nil, "", err
		}
	}
}

// MasterAddr asks the Sentinels which server is the master.
func (s *Sentinel) MasterAddr() (string, error) {
	var last error
	for _, a := range s.Addrs {
		c := redis.NewSentinelClient(&redis.Options{Addr: a, DialTimeout: 200 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		hp, err := c.GetMasterAddrByName(ctx, s.Master).Result()
		cancel()
		c.Close()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1]), nil
		}
		last = err
	}
	return "", fmt.Errorf("redisproc: no Sentinel names the master: %v", last)
}

// CurrentMaster returns the server the Sentinels name the master.
func (s *Sentinel) CurrentMaster() (*Redis, error) {
	addr, err := s.MasterAddr()
	if err != nil {
		return nil, err
	}
	for _, r := range s.Servers {
		if r.Addr == addr {
			return r, nil
		}
	}
	return nil, fmt.Errorf("redisproc: the Sentinels name %s, none of ours", addr)
}

// waitHealthy waits until every Sentinel knows the master, one replica
// and two other Sentinels, and the replica's link to the master is up.
func (s *Sentinel) waitHealthy(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := s.healthy()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisproc: Sentinel topology not healthy after %v: %w", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *Sentinel) healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	master, err := s.MasterAddr()
	if err != nil {
		return err
	}
	for _, a := range s.Addrs {
		c := redis.NewSentinelClient(&redis.Options{Addr: a, DialTimeout: 200 * time.Millisecond})
		m, err := c.Master(ctx, s.Master).Result()
		c.Close()
		if err != nil {
			return err
		}
		if m["num-other-sentinels"] != "2" || m["num-slaves"] != "1" || strings.Contains(m["flags"], "down") {
			return fmt.Errorf("sentinel %s: %v", a, m)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: master, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "connected_slaves:1") || !strings.Contains(info, "state=online") {
		return fmt.Errorf("master %s: replica not online", master)
	}
	return nil
}

// Heal restarts the servers that were killed (a killed master comes back
// empty, and the Sentinels make it a replica) and waits until the
// topology is healthy again.
func (s *Sentinel) Heal() error {
	for _, r := range s.Servers {
		if r.cmd == nil {
			if err := r.start(); err != nil {
				return err
			}
		}
	}
	return s.waitHealthy(30 * time.Second)
}

// Close stops every process.
func (s *Sentinel) Close() {
	for _, c := range s.sentinels {
		c.Process.Signal(syscall.SIGKILL)
		c.Wait()
	}
	for _, r := range s.Servers {
		r.Kill()
	}
}

// Cluster is a Redis Cluster of three masters, with a replica each or
// none.
type Cluster struct {
	Addrs    []string // the masters at start
	Servers  []*Redis
	replicas int
}

// StartCluster starts the nodes of a Cluster of three masters in dir, with
// replicas replicas each (0 or 1), passing extra to every redis-server,
// and waits until it is ok everywhere.
func StartCluster(dir string, replicas int, extra ...string) (*Cluster, error) {
	c := &Cluster{replicas: replicas}
	var all []string
	for i := range 3 * (1 + replicas) {
		r, err := startServer(filepath.Join(dir, fmt.Sprintf("node-%d", i)), append([]string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000"}, extra...)...)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Servers = append(c.Servers, r)
		all = append(all, r.Addr)
	}
	c.Addrs = all[:3]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append(append([]string{"--cluster", "create"}, all...), "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")...).CombinedOutput()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("redisproc: redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitHealthy(60 * time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// MasterWith returns the master that holds a key matching pattern.
func (c *Cluster) MasterWith(pattern string) (*Redis, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, r := range c.Servers {
		if r.cmd == nil {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: r.Addr, DialTimeout: 200 * time.Millisecond})
		role, _ := cl.Info(ctx, "replication").Result()
		keys, _, err := cl.Scan(ctx, 0, pattern, 100000).Result()
		cl.Close()
		if err == nil && len(keys) > 0 && strings.Contains(role, "role:master") {
			return r, nil
		}
	}
	return nil, fmt.Errorf("redisproc: no master holds a key matching %q", pattern)
}

// waitHealthy waits until every live node says cluster_state:ok and knows
// every node, and each master has its linked replica.
func (c *Cluster) waitHealthy(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := c.healthy()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisproc: Cluster not healthy after %v: %w", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	linked := 0
	for _, r := range c.Servers {
		cl := redis.NewClient(&redis.Options{Addr: r.Addr, DialTimeout: 200 * time.Millisecond})
		info, err := cl.ClusterInfo(ctx).Result()
		if err == nil && (!strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(c.Servers)))) {
			err = fmt.Errorf("%s: %s", r.Addr, info)
		}
		if err == nil {
			var rep string
			rep, err = cl.Info(ctx, "replication").Result()
			if strings.Contains(rep, "role:slave") && strings.Contains(rep, "master_link_status:up") {
				linked++
			}
		}
		cl.Close()
		if err != nil {
			return err
		}
	}
	if linked != 3*c.replicas {
		return fmt.Errorf("%d replicas linked, want %d", linked, 3*c.replicas)
	}
	return nil
}

// Heal restarts the nodes that were killed (each rejoins as a replica of
// its promoted one) and waits until the Cluster is healthy again.
func (c *Cluster) Heal() error {
	for _, r := range c.Servers {
		if r.cmd == nil {
			if err := r.start(); err != nil {
				return err
			}
		}
	}
	return c.waitHealthy(60 * time.Second)
}

// Close stops every node.
func (c *Cluster) Close() {
	for _, r := range c.Servers {
		r.Kill()
	}
}

// Redis is a redis-server process of the driver's, on a free loopback
// port, persistence off: killed, restarted empty, paused and resumed.
type Redis struct {
	Addr string
	bin  string
	args []string
	cmd  *exec.Cmd
}

// Start starts a redis-server on a free loopback port.
func Start(dir string) (*Redis, error) {
	return startServer(dir)
}

func (r *Redis) start() error {
	r.cmd = exec.Command(r.bin, r.args...)
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		return err
	}
	if err := answering(r.cmd, r.Addr, 10*time.Second); err != nil {
		r.Kill()
		return err
	}
	return nil
}

// Kill kills the server (SIGKILL) and waits for it.
func (r *Redis) Kill() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGCONT)
	r.cmd.Process.Signal(syscall.SIGKILL)
	r.cmd.Wait()
	r.cmd = nil
}

// Restart starts the server again, empty, on the same port.
func (r *Redis) Restart() error {
	r.Kill()
	return r.start()
}

// Pause stops the server (SIGSTOP): connections stay open, nothing answers.
func (r *Redis) Pause() { r.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (r *Redis) Resume() { r.cmd.Process.Signal(syscall.SIGCONT) }

// Close stops the server.
func (r *Redis) Close() { r.Kill() }
