// Package proc supervises the processes the load tool starts — the service instances it builds
// and spawns, the bare servers and the instances' etcd it re-executes itself as — and reads what
// each one costs in memory from /proc.
package proc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Instance is a process the tool started: a service instance, or a bare server.
type Instance struct {
	URL    string
	Redis  string // the address of its embedded Redis, if it started one
	SQLite string // the file of its embedded SQL store, if it opened one
	Cmd    *exec.Cmd
	exited chan error
}

// Build builds cmd/api into dir once per run, however many sets of processes the run starts.
func Build(ctx context.Context, dir string, logs io.Writer) (string, error) {
	bin := filepath.Join(dir, "seckill")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/flashsale/seckill/cmd/api")
	cmd.Stdout, cmd.Stderr = logs, logs
	fmt.Fprintln(logs, "loadtest: building cmd/api")
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build cmd/api: %w", err)
	}
	return bin, nil
}

// Spawn starts n processes of bin (cmd/api) on loopback ports, sharing backends: those given in
// env (a MySQL DSN, Redis addresses, the etcd the tool started), and for the rest the embedded
// ones of the first process — its data dir (SQLite) under dir and its in-process Redis — so that
// all n contend for the same locks, as replicas behind a load balancer would.
func Spawn(ctx context.Context, bin string, n int, dir string, env []string, logs io.Writer) ([]*Instance, error) {
	base := append(os.Environ(), "SECKILL_ADDR=127.0.0.1:0", "SECKILL_DATA_DIR="+filepath.Join(dir, "data"),
		"SECKILL_ALLOW_UNSAFE=true", "SECKILL_LOG_FORMAT=json")
	base = append(base, env...)
	var out []*Instance
	for i := range n {
		procEnv := base
		if i > 0 && out[0].Redis != "" {
			procEnv = append(procEnv, "SECKILL_REDIS_ADDRS="+out[0].Redis)
		}
		inst, err := Start(ctx, bin, procEnv, filepath.Join(dir, fmt.Sprintf("instance-%d.log", i)))
		if err != nil {
			Stop(out)
			return nil, err
		}
		out = append(out, inst)
		fmt.Fprintf(logs, "loadtest: started %s (log: %s)\n", inst.URL, filepath.Join(dir, fmt.Sprintf("instance-%d.log", i)))
	}
	return out, nil
}

// Start starts one process and reads its start-up lines until it says where it listens.
func Start(ctx context.Context, bin string, env []string, logPath string) (*Instance, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = env
	var lastErr lastLineWriter
	cmd.Stderr = io.MultiWriter(logFile, &lastErr)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	inst := &Instance{Cmd: cmd, exited: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if v, ok := strings.CutPrefix(line, "redis: embedded (miniredis) at "); ok {
				inst.Redis, _, _ = strings.Cut(v, " ")
			}
			if v, ok := strings.CutPrefix(line, "database: embedded SQLite at "); ok {
				if i := strings.LastIndex(v, " ("); i > 0 {
					inst.SQLite = v[:i] // the path, before the hint in parentheses
				}
			}
			if v, ok := strings.CutPrefix(line, "listening on "); ok {
				inst.URL = v
				close(ready)
			}
		}
		inst.exited <- cmd.Wait()
		_ = logFile.Close()
	}()
	select {
	case <-ready:
		return inst, nil
	case err := <-inst.exited:
		// The log is in the run's temporary folder, gone when the tool exits: the last line of
		// the process's stderr — its own error, a refused database connection say — goes in the
		// message.
		return nil, fmt.Errorf("%s exited at start (%v): %s", filepath.Base(bin), err, lastErr.String())
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		return nil, errors.New(filepath.Base(bin) + " did not start listening within 2 minutes; see " + logPath)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, ctx.Err()
	}
}

// Stop sends SIGTERM to every instance (graceful shutdown) and waits, killing laggards.
func Stop(instances []*Instance) {
	for _, inst := range instances {
		_ = inst.Cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, inst := range instances {
		select {
		case <-inst.exited:
		case <-time.After(30 * time.Second):
			_ = inst.Cmd.Process.Kill()
			<-inst.exited
		}
	}
}

// lastLineWriter remembers the last non-empty line written to it.
type lastLineWriter struct {
	mu      sync.Mutex
	partial []byte // the line being written
	last    string
}

func (w *lastLineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		if line := strings.TrimSpace(string(w.partial[:i])); line != "" {
			w.last = line
		}
		w.partial = w.partial[i+1:]
	}
}

// String is the last non-empty line, the unfinished one if it has any text.
func (w *lastLineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if line := strings.TrimSpace(string(w.partial)); line != "" {
		return line
	}
	return w.last
}
