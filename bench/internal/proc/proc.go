// Package proc starts and stops the processes the benchmarks run.
package proc

import (
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

// Stop sends cmd's process SIGTERM and waits for it to exit, killing it
// if it has not within grace.
func Stop(cmd *exec.Cmd, grace time.Duration) {
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		cmd.Process.Kill()
		<-done
	}
}

// Redis starts a private redis-server keeping its files in dir (a
// temporary directory when dir is empty) and returns its address and a
// function that stops it and removes the temporary directory.
func Redis(dir string) (addr string, stop func(), err error) {
	tmp := ""
	if dir == "" {
		if tmp, err = os.MkdirTemp("", "redis"); err != nil {
			return "", nil, err
		}
		dir = tmp
	}
	srv, err := redisproc.Start(dir)
	if err != nil {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
		return "", nil, err
	}
	return srv.Addr, func() {
		srv.Close()
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}, nil
}

// Cluster starts a Redis Cluster of three masters, no replicas, its nodes'
// files in dir (emptied first: a node's old nodes.conf would name old
// ports), and returns the masters' addresses and a function that stops
// every node by its PID.
func Cluster(dir string) (addrs []string, stop func(), err error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, nil, err
	}
	c, err := redisproc.StartCluster(dir, 0)
	if err != nil {
		return nil, nil, err
	}
	return c.Addrs, c.Close, nil
}
