package outage

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
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
		sc.Buffer(nil, 16<<20) // a bucket's lines carry every admission's time
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

// Windows sums the Window lines of procs by mode and window (their Times
// joined, unsorted).
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
			s.Degraded += l.Degraded
			s.MaxLatency = max(s.MaxLatency, l.MaxLatency)
			s.Times = append(s.Times, l.Times...)
			m[l.Window] = s
		}
	}
	return out
}
