// Package process runs the server processes that tests, the lab and the load tool start
// themselves (ZooKeeper, nats-server, redis-server): started so that they never outlive their
// starter, killed as a crash would kill them, and started as a group that is up together or not
// at all.
package process

import (
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// Proc is one server process; the zero value is not running.
type Proc struct {
	cmd *exec.Cmd
}

// Start starts cmd. The kernel kills it when its starter dies, so a test that crashes leaves no
// server behind.
func (p *Proc) Start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd = cmd
	return nil
}

// Running reports whether the process was started and not killed since.
func (p *Proc) Running() bool { return p.cmd != nil }

// Kill stops the process abruptly (SIGKILL), as a crash would, and waits until it has exited.
func (p *Proc) Kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

// Stop stops the process as its operator would (SIGTERM): it ends on its own, its state written
// out, and Stop waits until it has exited — or kills it after grace.
func (p *Proc) Stop(grace time.Duration) {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-exited
	}
	p.cmd = nil
}

// StartAll launches n servers, then waits for all of them at once (a cluster elects its leader
// only once its members are up); on any failure it kills them all.
func StartAll(n int, launch, ready func(i int) error, killAll func()) error {
	for i := range n {
		if err := launch(i); err != nil {
			killAll()
			return err
		}
	}
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- ready(i) }()
	}
	var err error
	for range n {
		err = errors.Join(err, <-errs)
	}
	if err != nil {
		killAll()
	}
	return err
}
