package redisserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/flashsale/seckill/devserver/freeport"
)

// startReplica starts one server in dir that replicates master (host:port — which may be a
// fault proxy in front of the real master, to hold or cut the replication link), and waits
// until it answers PING.
func startReplica(dir, master string) (*Server, error) {
	host, port, err := net.SplitHostPort(master)
	if err != nil {
		return nil, err
	}
	ports, err := freeport.Ports(1)
	if err != nil {
		return nil, err
	}
	s := &Server{Port: ports[0], Dir: filepath.Join(dir, fmt.Sprintf("replica%d", ports[0])), args: []string{"--replicaof", host, port}}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// startSentinels starts n Sentinels in dir that watch master under name, with a quorum of a
// majority of them; a master that has not answered for downAfter is down for a Sentinel, and a
// failover that has not finished within twice the failover timeout may be tried again. Each
// Sentinel rewrites its configuration file as it learns the replicas and the other Sentinels.
func startSentinels(dir string, n int, name, master string, downAfter time.Duration) ([]*Server, error) {
	host, port, err := net.SplitHostPort(master)
	if err != nil {
		return nil, err
	}
	ports, err := freeport.Ports(n)
	if err != nil {
		return nil, err
	}
	var sentinels []*Server
	for _, p := range ports {
		d := filepath.Join(dir, fmt.Sprintf("sentinel%d", p))
		if err := os.MkdirAll(d, 0o755); err != nil {
			Kill(sentinels...)
			return nil, err
		}
		conf := filepath.Join(d, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %s %s %s %d\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s %d\n",
			name, host, port, n/2+1, name, downAfter.Milliseconds(), name, 4*downAfter.Milliseconds())
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			Kill(sentinels...)
			return nil, err
		}
		s := &Server{Port: p, Dir: d, args: []string{conf, "--sentinel"}}
		if err := s.Start(); err != nil {
			Kill(sentinels...)
			return nil, err
		}
		sentinels = append(sentinels, s)
	}
	return sentinels, nil
}

// SentinelSet is a master, one replica, and three Sentinels watching the master under Name: the
// deployment of the oversell incident of «Locks in practice» (docs/sources.md), and of a service in Sentinel mode.
type SentinelSet struct {
	Name            string
	Master, Replica *Server
	Sentinels       []*Server
}

// StartSentinelSet starts a master, its replica and three Sentinels in dir that promote the
// replica once the master has not answered for downAfter; on failure it kills what it started.
func StartSentinelSet(dir, name string, downAfter time.Duration) (*SentinelSet, error) {
	servers, err := Start(dir, 1)
	if err != nil {
		return nil, err
	}
	s := &SentinelSet{Name: name, Master: servers[0]}
	if s.Replica, err = startReplica(dir, s.Master.Addr()); err != nil {
		s.Kill()
		return nil, err
	}
	if s.Sentinels, err = startSentinels(dir, 3, name, s.Master.Addr(), downAfter); err != nil {
		s.Kill()
		return nil, err
	}
	return s, nil
}

// Kill kills every server of the set.
func (s *SentinelSet) Kill() {
	Kill(s.Sentinels...)
	if s.Replica != nil {
		s.Replica.Kill()
	}
	s.Master.Kill()
}

// SentinelAddrs are the Sentinels' addresses, what a client in Sentinel mode is given.
func (s *SentinelSet) SentinelAddrs() []string { return Addrs(s.Sentinels...) }

// WaitReplicated waits, for at most bound, until the replica has everything the master wrote
// and every Sentinel knows the replica — without which none could promote it.
func (s *SentinelSet) WaitReplicated(ctx context.Context, bound time.Duration) error {
	m, r := s.Master.Client(), s.Replica.Client()
	defer m.Close()
	defer r.Close()
	return poll(ctx, bound, "the replica did not catch up, or the Sentinels did not find it", func() bool {
		mi, err := m.Info(ctx, "replication").Result()
		if err != nil {
			return false
		}
		ri, err := r.Info(ctx, "replication").Result()
		if err != nil || infoField(ri, "master_link_status") != "up" || infoField(mi, "master_repl_offset") != infoField(ri, "slave_repl_offset") {
			return false
		}
		for _, sn := range s.Sentinels {
			c := sn.Client()
			replicas, err := c.Do(ctx, "SENTINEL", "REPLICAS", s.Name).Slice()
			c.Close()
			if err != nil || len(replicas) == 0 {
				return false
			}
		}
		return true
	})
}

// WaitPromoted waits, for at most bound, until a Sentinel names the replica as the master.
func (s *SentinelSet) WaitPromoted(ctx context.Context, bound time.Duration) error {
	c := s.Sentinels[0].Client()
	defer c.Close()
	return poll(ctx, bound, "the Sentinels did not promote the replica", func() bool {
		addr, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Name).StringSlice()
		return err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == s.Replica.Addr()
	})
}

// CutReplication ends the replica's stream from the master and keeps it from coming back: the
// replica is told a password for its master, which has none, so every reconnection fails at
// AUTH. What the master writes from now on never reaches the replica. (A proxy on the link would
// not do: the Sentinels see the replica following another address and point it straight at the
// master.) Cut off for only a moment when the master dies, the replica is still one the
// Sentinels promote: they pass over one cut off for longer than ten times the down-after period.
func (s *SentinelSet) CutReplication(ctx context.Context) error {
	r := s.Replica.Client()
	defer r.Close()
	if err := r.ConfigSet(ctx, "masterauth", "cut").Err(); err != nil {
		return err
	}
	if err := r.Do(ctx, "CLIENT", "KILL", "TYPE", "master").Err(); err != nil {
		return err
	}
	return poll(ctx, 5*time.Second, "the replica's link to its master did not go down", func() bool {
		info, err := r.Info(ctx, "replication").Result()
		return err == nil && infoField(info, "master_link_status") == "down"
	})
}

// infoField is one field of an INFO answer, "" when absent.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// poll asks done every 20 ms until it is true, for at most bound; then it fails with what.
func poll(ctx context.Context, bound time.Duration, what string, done func() bool) error {
	deadline := time.Now().Add(bound)
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s within %s", what, bound)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
