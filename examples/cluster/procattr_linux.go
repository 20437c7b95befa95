package main

import "syscall"

// childAttr puts a child in a process group of its own (a Ctrl-C on the
// terminal reaches the driver only) and has the kernel kill it if the driver
// dies without stopping it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
