// Package natsserver runs NATS servers with JetStream — one, or a cluster of several — as
// processes of nats-server at the version the service embeds (go.mod's
// github.com/nats-io/nats-server/v2, built once with the Go toolchain and kept by version), on
// free loopback ports, for the tests (internal/backendtest) and the load tool. The service embeds
// its own server when it is given none (internal/orderqueue); a fault test needs servers it can
// SIGKILL and start again on their data, which only a process of its own gives. It is public so
// that the load tool, a black box of the service, starts its NATS the same way.
package natsserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flashsale/seckill/devserver/freeport"
	"github.com/flashsale/seckill/devserver/process"
)

// module is the server's Go module; its main package is the module root.
const module = "github.com/nats-io/nats-server/v2"

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// Available builds the server, once per process, or says why it cannot.
func Available() error {
	buildOnce.Do(func() { binary, buildErr = build() })
	return buildErr
}

// build compiles nats-server at the version go.mod requires into the user's cache directory,
// named by that version, unless it is there already. It needs the Go toolchain and a working
// directory inside this module, as the tests and `go run ./loadtest` have.
func build() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", module).Output()
	if err != nil {
		return "", fmt.Errorf("nats-server: the version go.mod requires (go list -m %s): %w", module, err)
	}
	version := strings.TrimSpace(string(out))
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "seckill", "nats-server-"+version)
	bin := filepath.Join(dir, "nats-server")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Built beside its place and renamed into it, so that test processes building at once never
	// start a half-written file.
	tmp, err := os.CreateTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	_ = tmp.Close()
	defer os.Remove(tmp.Name())
	if out, err := exec.Command("go", "build", "-o", tmp.Name(), module).CombinedOutput(); err != nil {
		return "", fmt.Errorf("nats-server: go build %s@%s: %w: %s", module, version, err, out)
	}
	return bin, os.Rename(tmp.Name(), bin)
}

// Server is one nats-server process: standalone, or a member of a cluster.
type Server struct {
	URL  string // the client URL, nats://127.0.0.1:port
	Name string // its server name, unique in the cluster
	Dir  string // its JetStream store and its log
	args []string
	proc process.Proc
}

// New lays out n servers under dir (n = 1: standalone; more: one cluster whose routes name every
// member), each with JetStream and its own store, on free loopback ports, and returns them, not
// started.
func New(dir string, n int) ([]*Server, error) {
	if n < 1 {
		return nil, errors.New("natsserver: at least one server")
	}
	ports, err := freeport.Ports(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[2*i+1]))
	}
	var servers []*Server
	for i := range n {
		s := &Server{
			URL:  fmt.Sprintf("nats://127.0.0.1:%d", ports[2*i]),
			Name: "n" + strconv.Itoa(i+1),
			Dir:  filepath.Join(dir, "n"+strconv.Itoa(i+1)),
		}
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			return nil, err
		}
		// Every write synced before it is acknowledged, as the embedded server does: an order
		// answered 202 survives a crash of the machine, not only of the process.
		conf := filepath.Join(s.Dir, "server.conf")
		if err := os.WriteFile(conf, []byte("jetstream { sync_interval: always }\n"), 0o644); err != nil {
			return nil, err
		}
		s.args = []string{"-c", conf, "-a", "127.0.0.1", "-p", strconv.Itoa(ports[2*i]), "-js", "-sd", s.Dir, "-n", s.Name,
			"-l", filepath.Join(s.Dir, "server.log")}
		if n > 1 {
			s.args = append(s.args, "--cluster_name", "sk", "--cluster", routes[i], "--routes", strings.Join(routes, ","))
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// URLs returns the client URLs of servers, for a connection string.
func URLs(servers ...*Server) []string {
	var out []string
	for _, s := range servers {
		out = append(out, s.URL)
	}
	return out
}

// StartAll starts every server and waits until JetStream answers on each — in a cluster, until
// the members have elected a metadata leader and it can place a stream on every member; on
// failure it stops those it started.
func StartAll(servers []*Server) error {
	err := process.StartAll(len(servers), func(i int) error { return servers[i].launch() },
		func(i int) error { return servers[i].waitServing() }, func() { Kill(servers...) })
	if err != nil || len(servers) == 1 {
		return err
	}
	if err := waitPlacing(servers); err != nil {
		Kill(servers...)
		return err
	}
	return nil
}

// waitPlacing waits up to 30 s until the cluster places a stream with a replica on every member:
// a metadata leader answers before it has heard from every peer, and until then a stream of
// that many replicas is refused ("no suitable peers for placement").
func waitPlacing(servers []*Server) error {
	nc, err := nats.Connect(strings.Join(URLs(servers...), ","), nats.Timeout(time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	probe := jetstream.StreamConfig{Name: "NATSSERVER_PROBE", Subjects: []string{"natsserver.probe"},
		Storage: jetstream.MemoryStorage, Replicas: len(servers)}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = js.CreateStream(ctx, probe)
		if err == nil {
			err = js.DeleteStream(ctx, probe.Name)
		}
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("a cluster of %d nats-servers places no stream on all of them after 30 s: %w", len(servers), err)
	}
	return nil
}

// Kill stops servers abruptly (SIGKILL), as a crash would.
func Kill(servers ...*Server) {
	for _, s := range servers {
		s.Kill()
	}
}

// Start starts the server (again, on its store: a restarted member rejoins its cluster and
// catches up) and waits until JetStream answers on it.
func (s *Server) Start() error {
	if err := s.launch(); err != nil {
		return err
	}
	return s.waitServing()
}

func (s *Server) launch() error {
	if err := Available(); err != nil {
		return err
	}
	return s.proc.Start(exec.Command(binary, s.args...))
}

// waitServing waits up to 30 s for the server to answer a JetStream account request, which needs
// a metadata leader in a cluster: before that, streams cannot be created.
func (s *Server) waitServing() error {
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if last = s.ping(); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
	return fmt.Errorf("nats-server %s not serving JetStream after 30 s (%v); its log ends:\n%s", s.URL, last,
		log[max(0, len(log)-2000):])
}

func (s *Server) ping() error {
	nc, err := nats.Connect(s.URL, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// Kill stops the server abruptly (SIGKILL), as a crash would.
func (s *Server) Kill() { s.proc.Kill() }

// Stop shuts the server down cleanly (SIGTERM, 10 s at most): its stores written out.
func (s *Server) Stop() { s.proc.Stop(10 * time.Second) }
