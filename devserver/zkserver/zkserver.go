// Package zkserver runs ZooKeeper servers — standalone, or an ensemble — as processes of Debian's
// package (apt-get install -y zookeeper; Java is needed), on free loopback ports, for the tests
// (internal/backendtest), the lab and the load tool. ZooKeeper is a Java server: unlike etcd, it
// cannot be embedded in the service. It is public so that the load tool, a black box of the
// service, starts its ZooKeeper the same way.
package zkserver

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/flashsale/seckill/devserver/freeport"
	"github.com/flashsale/seckill/devserver/process"
)

const (
	jar       = "/usr/share/java/zookeeper.jar"
	classpath = "/usr/share/zookeeper/*:/usr/share/java/*"
	// tick is the servers' tick. Sessions last between 2 and 20 ticks: with 500 ms, the service's
	// 2 s session timeout is granted as asked (ZooKeeper's default tick, 2 s, would make it 4 s).
	tick = 500 * time.Millisecond
)

// Available says why no server can be started here, or nil.
func Available() error {
	if _, err := os.Stat(jar); err != nil {
		return fmt.Errorf("ZooKeeper is not installed (apt-get install -y zookeeper): %w", err)
	}
	if _, err := exec.LookPath("java"); err != nil {
		return fmt.Errorf("ZooKeeper needs java: %w", err)
	}
	return nil
}

// Server is one ZooKeeper server process: standalone, or a member of an ensemble.
type Server struct {
	Addr string // the client address, 127.0.0.1:port
	Dir  string // its configuration, data and log
	proc process.Proc
}

// New writes the configuration of an ensemble of n servers under dir (n = 1: standalone) — a
// zoo.cfg and a myid each, on free loopback ports — and returns them, not started.
func New(dir string, n int) ([]*Server, error) {
	if n < 1 {
		return nil, errors.New("zkserver: at least one server")
	}
	ports, err := freeport.Ports(3 * n)
	if err != nil {
		return nil, err
	}
	var peers []string
	if n > 1 {
		for i := range n {
			peers = append(peers, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ports[3*i+1], ports[3*i+2]))
		}
	}
	var servers []*Server
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("zk%d", i+1))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		cfg := append([]string{
			"tickTime=" + strconv.FormatInt(tick.Milliseconds(), 10),
			"initLimit=20", "syncLimit=4",
			"dataDir=" + d,
			"clientPortAddress=127.0.0.1",
			"clientPort=" + strconv.Itoa(ports[3*i]),
			"admin.enableServer=false",
			"minSessionTimeout=1000",
			"4lw.commands.whitelist=srvr",
		}, peers...)
		if err := os.WriteFile(filepath.Join(d, "zoo.cfg"), []byte(strings.Join(cfg, "\n")+"\n"), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(d, "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
			return nil, err
		}
		servers = append(servers, &Server{Addr: fmt.Sprintf("127.0.0.1:%d", ports[3*i]), Dir: d})
	}
	return servers, nil
}

// StartAll starts every server of an ensemble and waits until each serves; on failure it stops
// those it started.
func StartAll(servers []*Server) error {
	return process.StartAll(len(servers), func(i int) error { return servers[i].launch() },
		func(i int) error { return servers[i].waitServing() }, func() { Kill(servers...) })
}

// Addrs returns the client addresses of servers, for a connection string.
func Addrs(servers ...*Server) []string {
	var out []string
	for _, s := range servers {
		out = append(out, s.Addr)
	}
	return out
}

// Kill stops servers abruptly (SIGKILL), as a crash would.
func Kill(servers ...*Server) {
	for _, s := range servers {
		s.Kill()
	}
}

// Start starts the server (again, on its data: a restarted member rejoins its ensemble) and
// waits until it serves clients — in an ensemble, until it has a leader.
func (s *Server) Start() error {
	if err := s.launch(); err != nil {
		return err
	}
	return s.waitServing()
}

// launch starts the JVM, its output in the server's directory. A small heap and the client
// compiler: it starts faster and leaves the machine's cores to what is measured.
func (s *Server) launch() error {
	out, err := os.OpenFile(filepath.Join(s.Dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command("java", "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.log.dir="+s.Dir, "-cp", classpath,
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(s.Dir, "zoo.cfg"))
	cmd.Stdout, cmd.Stderr = out, out
	return s.proc.Start(cmd)
}

// waitServing waits up to 30 s for the four-letter word srvr to name the server's mode.
func (s *Server) waitServing() error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if mode, err := s.Mode(); err == nil && mode != "" {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
	return fmt.Errorf("zookeeper %s not serving after 30 s; its log ends:\n%s", s.Addr, log[max(0, len(log)-2000):])
}

// Mode asks the server (srvr) whether it serves, and as what: standalone, leader or follower.
func (s *Server) Mode() (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if mode, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return mode, nil
		}
	}
	return "", sc.Err()
}

// Kill stops the server abruptly (SIGKILL), as a crash would.
func (s *Server) Kill() { s.proc.Kill() }
