// Package proc stops the processes the benchmarks start.
package proc

import (
	"os/exec"
	"syscall"
	"time"
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
