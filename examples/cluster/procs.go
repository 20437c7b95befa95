package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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

// proc is a child process the driver started and stops by its PID.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	keep io.Closer     // the write end of the child's standard input, if any
}

// startProc starts cmd as a child in a process group of its own, so that a
// Ctrl-C on the terminal reaches the driver alone, which stops its children
// in order; on Linux the children are also killed if the driver dies.
// keep, if not nil, is closed once the process has exited.
func startProc(name string, cmd *exec.Cmd, keep io.Closer) (*proc, error) {
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), keep: keep}
	go func() {
		cmd.Wait()
		if p.keep != nil {
			p.keep.Close()
		}
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the process to be reaped.
func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM, and SIGKILL if the process is still there after grace;
// it returns once the process has been reaped.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// ensureRedis makes sure redis-server is on PATH. When it is missing it runs
// the repository's scripts/redis.sh ensure (apt-get update and install,
// with sudo when not root), as make test does.
func ensureRedis(install bool) error {
	if _, err := exec.LookPath("redis-server"); err == nil {
		return nil
	}
	if !install {
		return errors.New("redis-server is not on PATH (run scripts/redis.sh ensure, or drop -install=false)")
	}
	script := filepath.Join("scripts", "redis.sh")
	if _, err := os.Stat(script); err != nil {
		return fmt.Errorf("redis-server is not on PATH and %s is not here (run the demo from the repository's root, or install redis-server)", script)
	}
	fmt.Fprintln(os.Stderr, "demo: redis-server not found: installing it with", script, "ensure")
	cmd := exec.Command("bash", script, "ensure")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s ensure: %w", script, err)
	}
	_, err := exec.LookPath("redis-server")
	return err
}

// redisServer is the demo's redis-server: persistence off, on a loopback
// port that stays the same across a restart.
type redisServer struct {
	port int
	dir  string
	p    *proc
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// startRedis starts a redis-server on a free loopback port, retrying on
// another one if the port was taken between the check and the bind.
func startRedis(ctx context.Context, dir string) (*redisServer, error) {
	// Absolute: redis-server changes to --dir before it opens --logfile.
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &redisServer{dir: dir}
	for range 5 {
		if r.port, err = freePort(); err != nil {
			return nil, err
		}
		if err = r.start(ctx); err == nil {
			return r, nil
		}
	}
	return nil, err
}

// start starts the server on r.port and waits until it answers PING.
func (r *redisServer) start(ctx context.Context) error {
	cmd := exec.Command("redis-server",
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--logfile", filepath.Join(r.dir, "redis.log"))
	var stderr strings.Builder // what it says before its log is open
	cmd.Stderr = &stderr
	p, err := startProc("redis-server", cmd, nil)
	if err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err = c.Ping(pctx).Err()
		cancel()
		if err == nil {
			r.p = p
			return nil
		}
		if p.exited() || time.Now().After(deadline) || ctx.Err() != nil {
			p.stop(time.Second)
			return fmt.Errorf("redis-server on %s did not start (%w): %s (see %s)", r.addr(), err,
				strings.TrimSpace(stderr.String()), filepath.Join(r.dir, "redis.log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// restart starts the server again, empty, on the same port, as after a
// crash without persistence.
func (r *redisServer) restart(ctx context.Context) error {
	var err error
	for range 10 { // the old socket may linger a moment
		if err = r.start(ctx); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// kill kills the server with SIGKILL, by PID.
func (r *redisServer) kill() {
	if r.p != nil {
		r.p.kill()
		r.p = nil
	}
}

func (r *redisServer) stop() {
	if r.p != nil {
		r.p.stop(5 * time.Second)
		r.p = nil
	}
}

// freePort returns a loopback port free now, for TCP and UDP (memberlist
// takes both), below Linux's ephemeral range (32768-60999, as
// scripts/redis.sh does): Redis restarts on the same port, which an outgoing
// connection must not take meanwhile.
func freePort() (int, error) {
	var err error
	for range 100 {
		p := 10000 + rand.IntN(12000)
		addr := "127.0.0.1:" + strconv.Itoa(p)
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err != nil {
			continue
		}
		var u net.PacketConn
		u, err = net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port in 10000-22000: %w", err)
}

// node is a node process and the address it serves on.
type node struct {
	id   int
	addr string
	p    *proc
}

// startNode starts this binary in node mode and reads the address it
// listens on. Its standard error goes to logPath.
func startNode(ctx context.Context, o nodeOptions, logPath string) (*node, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(exe, "-node", strconv.Itoa(o.id), "-nodes", strconv.Itoa(o.nodes), "-redis", o.redis,
		"-limit", strconv.FormatInt(o.limit, 10), "-algo", o.algo,
		"-gossip-port", strconv.Itoa(o.gossipPort), "-seeds", strings.Join(o.seeds, ","), "-records", o.records)
	// The gossip's key goes in the environment, where ps does not show it.
	cmd.Env = append(os.Environ(), gossipKeyEnv+"="+hex.EncodeToString(o.gossipKey))
	cmd.Stderr = logf
	// The node exits when its standard input closes: when the driver is gone,
	// whatever the way it went. The driver keeps the write end open.
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = stdinR, outW
	name := "node n" + strconv.Itoa(o.id)
	p, err := startProc(name, cmd, stdinW)
	// The child has its own copies: with ours closed, its exit is our EOF.
	stdinR.Close()
	outW.Close()
	if err != nil {
		stdinW.Close()
		outR.Close()
		return nil, err
	}
	line := make(chan string, 1)
	go func() {
		defer outR.Close()
		s, _ := bufio.NewReader(outR).ReadString('\n')
		line <- s
		io.Copy(io.Discard, outR)
	}()
	select {
	case s := <-line:
		if addr, ok := strings.CutPrefix(strings.TrimSpace(s), "listening "); ok {
			return &node{id: o.id, addr: addr, p: p}, nil
		}
		p.stop(time.Second)
		return nil, fmt.Errorf("%s did not start (see %s)", name, logPath)
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	p.stop(time.Second)
	return nil, fmt.Errorf("%s did not start in time (see %s)", name, logPath)
}
