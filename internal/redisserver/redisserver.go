// Package redisserver runs redis-server processes on free loopback ports, without persistence,
// for what needs Redis servers of its own: the independent nodes of a Redlock, which share
// nothing — not a cluster, not replicas — and one of which can be killed or made slow while the
// others go on. A node is made slow through Redis itself (CLIENT PAUSE, see Server.Pause), not
// by signalling its process, so the client sees exactly what a busy server does to it.
package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/devserver/freeport"
	"github.com/flashsale/seckill/devserver/process"
)

// Available says why no server can be started here, or nil.
func Available() error {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return fmt.Errorf("redis-server is not installed (apt-get install -y redis-server): %w", err)
	}
	return nil
}

// Server is one redis-server process.
type Server struct {
	Port int
	Dir  string // its working directory and log
	// args are what this server runs with beyond the port and the no-persistence settings:
	// a replica's --replicaof, a Sentinel's configuration file and --sentinel.
	args []string
	proc process.Proc
}

// Start starts n servers, each in a directory of its own under dir, and waits until every one
// answers PING; on failure it kills those it started.
func Start(dir string, n int) ([]*Server, error) {
	if n < 1 {
		return nil, errors.New("redisserver: at least one server")
	}
	if err := Available(); err != nil {
		return nil, err
	}
	ports, err := freeport.Ports(n)
	if err != nil {
		return nil, err
	}
	var servers []*Server
	for i, port := range ports {
		s := &Server{Port: port, Dir: filepath.Join(dir, fmt.Sprintf("redis%d", i+1))}
		servers = append(servers, s)
		if err := s.Start(); err != nil {
			Kill(servers...)
			return nil, err
		}
	}
	return servers, nil
}

// Addr is the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Start starts the server (again, on the same port: a killed node comes back empty, since
// nothing is saved) and waits up to 10 s until it answers PING.
func (s *Server) Start() error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(filepath.Join(s.Dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	// No RDB, no AOF: a lock node that restarts must come back empty, as the Redlock analysis
	// assumes of a node without fsync — and nothing is left on disk after the run.
	cmd := exec.Command("redis-server", append(slices.Clone(s.args), "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.Dir)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := s.proc.Start(cmd); err != nil {
		return fmt.Errorf("start redis-server on %s: %w", s.Addr(), err)
	}
	if err := s.waitPing(10 * time.Second); err != nil {
		s.Kill()
		log, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
		return fmt.Errorf("%w; its log ends:\n%s", err, log[max(0, len(log)-2000):])
	}
	return nil
}

// waitPing waits until the server answers PING, for at most bound. It speaks RESP over a plain
// connection: a go-redis client would retry each refused dial with a backoff, and log it.
func (s *Server) waitPing(bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		err := s.ping()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server %s does not answer PING after %s: %w", s.Addr(), bound, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping sends one PING and reads the answer.
func (s *Server) ping() error {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	answer, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if answer != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", answer)
	}
	return nil
}

// Client is a new client of the server, with go-redis's defaults; the caller closes it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr()})
}

// Pause makes the server hold every write command for d (CLIENT PAUSE d WRITE), and returns
// once the pause is in force: reads still answer, a SET waits until d has passed and then runs.
// This is a slow node as a client meets one — a long fsync, a fork for a snapshot, an overloaded
// host — without stopping the process. Redis ends a pause on its cron (10 times a second by
// default), so the held writes run up to 100 ms after d.
func (s *Server) Pause(ctx context.Context, d time.Duration) error {
	rdb := s.Client()
	defer rdb.Close()
	if err := rdb.Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "WRITE").Err(); err != nil {
		return fmt.Errorf("pause redis-server %s: %w", s.Addr(), err)
	}
	return nil
}

// Kill stops the server abruptly (SIGKILL), as a crash would, and waits until it has exited.
func (s *Server) Kill() { s.proc.Kill() }

// Kill kills servers (Server.Kill).
func Kill(servers ...*Server) {
	for _, s := range servers {
		s.Kill()
	}
}

// Addrs are the addresses of servers.
func Addrs(servers ...*Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr()
	}
	return out
}
