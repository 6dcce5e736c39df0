package runner

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

// instance is a process the tool started: a service instance, or a bare server.
type instance struct {
	url    string
	redis  string // the address of its embedded Redis, if it started one
	sqlite string // the file of its embedded SQL store, if it opened one
	cmd    *exec.Cmd
	exited chan error
}

// build builds cmd/api into dir once per run, however many sets of processes the run starts.
func build(ctx context.Context, dir string, logs io.Writer) (string, error) {
	bin := filepath.Join(dir, "seckill")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/flashsale/seckill/cmd/api")
	cmd.Stdout, cmd.Stderr = logs, logs
	fmt.Fprintln(logs, "loadtest: building cmd/api")
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build cmd/api: %w", err)
	}
	return bin, nil
}

// spawn starts n processes of bin (cmd/api) on loopback ports, sharing backends: those given in
// env (a MySQL DSN, Redis addresses, the etcd the tool started), and for the rest the embedded
// ones of the first process — its data dir (SQLite) under dir and its in-process Redis — so that
// all n contend for the same locks, as replicas behind a load balancer would.
func spawn(ctx context.Context, bin string, n int, dir string, env []string, logs io.Writer) ([]*instance, error) {
	base := append(os.Environ(), "SECKILL_ADDR=127.0.0.1:0", "SECKILL_DATA_DIR="+filepath.Join(dir, "data"),
		"SECKILL_ALLOW_UNSAFE=true", "SECKILL_LOG_FORMAT=json")
	base = append(base, env...)
	var out []*instance
	for i := range n {
		procEnv := base
		if i > 0 && out[0].redis != "" {
			procEnv = append(procEnv, "SECKILL_REDIS_ADDRS="+out[0].redis)
		}
		inst, err := start(ctx, bin, procEnv, filepath.Join(dir, fmt.Sprintf("instance-%d.log", i)))
		if err != nil {
			stop(out)
			return nil, err
		}
		out = append(out, inst)
		fmt.Fprintf(logs, "loadtest: started %s (log: %s)\n", inst.url, filepath.Join(dir, fmt.Sprintf("instance-%d.log", i)))
	}
	return out, nil
}

// start starts one process and reads its start-up lines until it says where it listens.
func start(ctx context.Context, bin string, env []string, logPath string) (*instance, error) {
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
	inst := &instance{cmd: cmd, exited: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if v, ok := strings.CutPrefix(line, "redis: embedded (miniredis) at "); ok {
				inst.redis, _, _ = strings.Cut(v, " ")
			}
			if v, ok := strings.CutPrefix(line, "database: embedded SQLite at "); ok {
				if i := strings.LastIndex(v, " ("); i > 0 {
					inst.sqlite = v[:i] // the path, before the hint in parentheses
				}
			}
			if v, ok := strings.CutPrefix(line, "listening on "); ok {
				inst.url = v
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

// stop sends SIGTERM to every instance (graceful shutdown) and waits, killing laggards.
func stop(instances []*instance) {
	for _, inst := range instances {
		_ = inst.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, inst := range instances {
		select {
		case <-inst.exited:
		case <-time.After(30 * time.Second):
			_ = inst.cmd.Process.Kill()
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
