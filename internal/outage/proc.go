package outage

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Proc is a node process started by Start.
type Proc struct {
	Spec   Spec
	Gossip string // its gossip address, once ready
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []Line
	done   chan struct{}
	err    error
}

// Start starts exe (internal/cmd/gossipnode) for spec and waits until it
// is ready (its Limiters built, its gossip node listening).
func Start(exe string, spec Spec) (*Proc, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	p := &Proc{Spec: spec, done: make(chan struct{})}
	p.cmd = exec.Command(exe, "-spec", string(js))
	p.cmd.Stderr = os.Stderr
	p.cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l Line
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			if l.Ready {
				ready <- l.Gossip
				continue
			}
			p.mu.Lock()
			p.lines = append(p.lines, l)
			p.mu.Unlock()
		}
		p.err = p.cmd.Wait()
	}()
	select {
	case p.Gossip = <-ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("outage: node %s exited before it was ready: %v", spec.Name, p.err)
	case <-time.After(time.Minute):
		p.Kill()
		return nil, fmt.Errorf("outage: node %s not ready after a minute", spec.Name)
	}
}

// Kill kills the process (SIGKILL) and waits for it.
func (p *Proc) Kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Wait waits for the process to end and returns its error.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Lines returns the Window lines the node wrote so far (and Done).
func (p *Proc) Lines() []Line {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Line(nil), p.lines...)
}

// Windows sums the Window lines of procs by mode and window.
func Windows(procs ...*Proc) map[string]map[int64]Line {
	out := map[string]map[int64]Line{}
	for _, p := range procs {
		for _, l := range p.Lines() {
			if l.Window == 0 {
				continue
			}
			m := out[l.Mode]
			if m == nil {
				m = map[int64]Line{}
				out[l.Mode] = m
			}
			s := m[l.Window]
			s.Mode, s.Window = l.Mode, l.Window
			s.Offered += l.Offered
			s.Admitted += l.Admitted
			s.Failed += l.Failed
			s.MaxLatency = max(s.MaxLatency, l.MaxLatency)
			m[l.Window] = s
		}
	}
	return out
}

// Redis is a redis-server process of the driver's, on a free loopback
// port, persistence off: killed, restarted empty, paused and resumed.
type Redis struct {
	Addr string
	bin  string
	args []string
	cmd  *exec.Cmd
}

// StartRedis starts a redis-server on a free loopback port.
func StartRedis(dir string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port), bin: bin,
		args: []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "no"}}
	return r, r.start()
}

func (r *Redis) start() error {
	r.cmd = exec.Command(r.bin, r.args...)
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("outage: redis-server on %s not answering: %w", r.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
