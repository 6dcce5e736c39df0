package mariadbserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/flashsale/seckill/devserver/freeport"
)

// provider is where Debian's galera-4 installs the wsrep provider.
const provider = "/usr/lib/galera/libgalera_smm.so"

// GaleraAvailable says why no Galera cluster can be started here, or nil.
func GaleraAvailable() error {
	if err := Available(); err != nil {
		return err
	}
	if _, err := os.Stat(provider); err != nil {
		return fmt.Errorf("galera-4 is not installed (apt-get install -y galera-4): %w", err)
	}
	// A node that rejoins needs a state transfer, even one that only replays the writes it
	// missed (IST): its script is mariabackup's, which streams with socat.
	for _, bin := range []string{"mariabackup", "socat"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is not installed (apt-get install -y mariadb-backup socat): %w", bin, err)
		}
	}
	return nil
}

// FailureDetection is the group communication's timing docs/databases.md recommends and the
// tests run: a node that stops answering is suspected after a second and dropped about a third of
// a second later, so the others commit again within 1.5 s of its death. Galera's defaults
// (keep-alive 1 s, suspect 5 s, join retransmission 1 s) stall every commit of the cluster for
// about 6 s: a commit is certified by the whole group, which waits until it knows its members.
const FailureDetection = "evs.keepalive_period=PT0.2S;evs.suspect_timeout=PT1S;evs.inactive_check_period=PT0.2S;" +
	"evs.inactive_timeout=PT2S;evs.install_timeout=PT2S;evs.join_retrans_period=PT0.3S"

// Galera is a MariaDB Galera cluster of mariadbd processes on loopback: every node takes writes
// (multi-primary), and a commit is certified against every other node's before it is answered.
type Galera struct {
	Nodes []*Server
}

// StartGalera starts a cluster of n nodes under dir and waits until each is synced. The first is
// bootstrapped once from a fresh data directory and its state copied to the others, so that they
// join by an empty incremental transfer instead of a full snapshot.
func StartGalera(dir string, n int) (*Galera, error) {
	if err := GaleraAvailable(); err != nil {
		return nil, err
	}
	ports, err := freeport.Ports(4 * n)
	if err != nil {
		return nil, err
	}
	var peers []string
	for i := range n {
		peers = append(peers, "127.0.0.1:"+strconv.Itoa(ports[4*i+1]))
	}
	g := &Galera{}
	for i := range n {
		gcomm, ist, sst := ports[4*i+1], ports[4*i+2], ports[4*i+3]
		g.Nodes = append(g.Nodes, &Server{Port: ports[4*i], Dir: filepath.Join(dir, fmt.Sprintf("node%d", i)), Args: []string{
			"--wsrep-on=ON", "--wsrep-provider=" + provider,
			"--wsrep-cluster-address=gcomm://" + strings.Join(peers, ","),
			fmt.Sprintf("--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;gcache.size=16M;%s",
				gcomm, ist, FailureDetection),
			fmt.Sprintf("--wsrep-sst-receive-address=127.0.0.1:%d", sst),
			"--wsrep-sst-method=mariabackup", "--wsrep-node-address=127.0.0.1", fmt.Sprintf("--wsrep-node-name=node%d", i),
			// What Galera requires: row events, and interleaved auto-increment locks.
			"--binlog-format=ROW", "--innodb-autoinc-lock-mode=2",
		}})
	}
	if err := g.start(); err != nil {
		g.Kill()
		return nil, err
	}
	return g, nil
}

func (g *Galera) start() error {
	first := g.Nodes[0]
	if err := os.MkdirAll(first.Dir, 0o755); err != nil {
		return err
	}
	if err := install(first.data()); err != nil {
		return err
	}
	if err := first.Start("--wsrep-new-cluster"); err != nil {
		return err
	}
	if err := g.waitSynced(first); err != nil {
		return err
	}
	first.Stop() // its state saved: the cluster's id and position, which the others copy
	for _, node := range g.Nodes[1:] {
		if err := node.copyData(first); err != nil {
			return err
		}
		state := filepath.Join(node.data(), "grastate.dat")
		b, err := os.ReadFile(state)
		if err != nil {
			return err
		}
		if err := os.WriteFile(state, []byte(strings.Replace(string(b), "safe_to_bootstrap: 1", "safe_to_bootstrap: 0", 1)), 0o644); err != nil {
			return err
		}
	}
	if err := first.Start("--wsrep-new-cluster"); err != nil {
		return err
	}
	// One at a time: nodes that join together can stall each other's membership round for
	// seconds under these short timeouts.
	for _, node := range g.Nodes {
		if !node.Running() {
			if err := node.Start(); err != nil {
				return err
			}
		}
		if err := g.waitSynced(node); err != nil {
			return err
		}
	}
	return nil
}

// waitSynced waits until node serves the cluster's data: in its primary component, synced.
func (g *Galera) waitSynced(node *Server) error {
	return node.poll(60*time.Second, "did not sync with the cluster", func(ctx context.Context) bool {
		st, err := node.Status(ctx, "wsrep_local_state_comment")
		return err == nil && st == "Synced"
	})
}

// Kill kills every node (SIGKILL).
func (g *Galera) Kill() { Kill(g.Nodes...) }

// recovered is the line mariadbd --wsrep-recover writes with the position it read from InnoDB.
var recovered = regexp.MustCompile(`WSREP: Recovered position: ([0-9a-f-]+:-?[0-9]+)`)

// Rejoin starts node i again after a crash and waits until it is synced: its last committed
// position is read from its own data first (mariadbd --wsrep-recover; a crash leaves none in
// grastate.dat), so that it asks the others only for the writes it missed (IST).
func (g *Galera) Rejoin(i int) error {
	node := g.Nodes[i]
	log := filepath.Join(node.Dir, "recover.log")
	_ = os.Remove(log)
	args := append([]string{"--no-defaults", "--datadir=" + node.data(), "--user=root", "--skip-networking",
		"--socket=" + filepath.Join(node.Dir, "recover.sock"), "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M"}, node.Args...)
	args = append(args, "--log-error="+log, "--wsrep-recover")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "mariadbd", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("mariadbd --wsrep-recover: %w: %s", err, out)
	}
	text, err := os.ReadFile(log)
	if err != nil {
		return err
	}
	m := recovered.FindAllStringSubmatch(string(text), -1)
	if m == nil {
		return fmt.Errorf("mariadbd --wsrep-recover found no position:\n%s", text)
	}
	if err := node.Start("--wsrep-start-position=" + m[len(m)-1][1]); err != nil {
		return err
	}
	return g.waitSynced(node)
}

// WaitFormed waits, for at most bound, until every running node is synced and counts the running
// nodes as the cluster's members: a killed node has been dropped, or a restarted one is back.
func (g *Galera) WaitFormed(bound time.Duration) error {
	running := 0
	for _, node := range g.Nodes {
		if node.Running() {
			running++
		}
	}
	for _, node := range g.Nodes {
		if !node.Running() {
			continue
		}
		err := node.poll(bound, fmt.Sprintf("did not count %d members", running), func(ctx context.Context) bool {
			st, err := node.Status(ctx, "wsrep_local_state_comment")
			size, serr := node.Status(ctx, "wsrep_cluster_size")
			return err == nil && serr == nil && st == "Synced" && size == strconv.Itoa(running)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Conflicts are the certification conflicts each node counted since it started (zero for a node
// that is not running): local transactions that failed certification at COMMIT
// (wsrep_local_cert_failures), and those aborted by a replicated write that won
// (wsrep_local_bf_aborts) — each answered 1213.
type Conflicts struct {
	CertFailures, BFAborts []int64
}

// Conflicts reads the conflicts every running node counted.
func (g *Galera) Conflicts(ctx context.Context) (Conflicts, error) {
	c := Conflicts{CertFailures: make([]int64, len(g.Nodes)), BFAborts: make([]int64, len(g.Nodes))}
	for i, node := range g.Nodes {
		if !node.Running() {
			continue
		}
		for name, count := range map[string]*int64{"wsrep_local_cert_failures": &c.CertFailures[i], "wsrep_local_bf_aborts": &c.BFAborts[i]} {
			v, err := node.Status(ctx, name)
			if err != nil {
				return Conflicts{}, err
			}
			if *count, err = strconv.ParseInt(v, 10, 64); err != nil {
				return Conflicts{}, err
			}
		}
	}
	return c, nil
}

// Since is how many conflicts the nodes counted after before. A node restarted since counts from
// its restart: what it counted before its death is gone with it.
func (c Conflicts) Since(before Conflicts) (certFailures, bfAborts int64) {
	for i := range c.CertFailures {
		if c.CertFailures[i] >= before.CertFailures[i] && c.BFAborts[i] >= before.BFAborts[i] {
			certFailures += c.CertFailures[i] - before.CertFailures[i]
			bfAborts += c.BFAborts[i] - before.BFAborts[i]
		} else {
			certFailures += c.CertFailures[i]
			bfAborts += c.BFAborts[i]
		}
	}
	return certFailures, bfAborts
}

// Isolate cuts node i off from the rest of the cluster (gmcast.isolate): it stays up, outside
// every primary component, and refuses to serve (1047) — a node behind a broken link.
func (g *Galera) Isolate(ctx context.Context, i int) error {
	return g.Nodes[i].Exec(ctx, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=1'")
}
