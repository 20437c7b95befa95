//go:build unix && !linux

package main

import "syscall"

// childAttr puts a child in a process group of its own: a Ctrl-C on the
// terminal reaches the driver only, which stops its children by PID.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
