package redisserver

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/devserver/freeport"
)

// Cluster is a Redis Cluster of servers on this machine: masters that share the hash slots and
// replicas that take a master's place when it fails.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts a Redis Cluster of masters masters with replicas replicas each, every node
// in a directory of its own under dir, and waits until every node reports cluster_state:ok. A
// node that has not answered its peers for nodeTimeout is failing, and its replica is promoted
// (cluster-node-timeout; Redis's default of 15 s would freeze a sale's slots for that long).
// Replicas take over however far behind they are (cluster-replica-validity-factor 0): the test
// is what happens to the writes they had not received.
func StartCluster(dir string, masters, replicas int, nodeTimeout time.Duration) (*Cluster, error) {
	if masters < 3 {
		return nil, errors.New("redisserver: a Redis Cluster needs at least three masters")
	}
	if err := Available(); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, fmt.Errorf("redis-cli is not installed (apt-get install -y redis-tools): %w", err)
	}
	n := masters * (1 + replicas)
	// A node's bus port is its port + 10000 unless set, and nobody checked that one was free:
	// each node gets a free one of its own.
	ports, err := freeport.Ports(2 * n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	for i, port := range ports[:n] {
		s := &Server{Port: port, Dir: filepath.Join(dir, fmt.Sprintf("cluster%d", port)), args: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", strconv.Itoa(ports[n+i]),
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
			"--cluster-replica-validity-factor", "0",
		}}
		c.Nodes = append(c.Nodes, s)
		if err := s.Start(); err != nil {
			c.Kill()
			return nil, err
		}
	}
	args := append([]string{"--cluster", "create"}, Addrs(c.Nodes...)...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.Kill()
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	if err := c.WaitOK(context.Background(), 30*time.Second); err != nil {
		c.Kill()
		return nil, err
	}
	return c, nil
}

// Addrs are the addresses of the cluster's nodes: seed nodes for a client.
func (c *Cluster) Addrs() []string { return Addrs(c.Nodes...) }

// WaitOK waits, for at most bound, until every running node reports cluster_state:ok: every slot
// is served, by a master every node agrees on.
func (c *Cluster) WaitOK(ctx context.Context, bound time.Duration) error {
	return poll(ctx, bound, "redis cluster: not every node in cluster_state:ok", func() bool {
		for _, s := range c.Nodes {
			if s.proc.Running() && !strings.Contains(s.clusterInfo(ctx), "cluster_state:ok") {
				return false
			}
		}
		return true
	})
}

// clusterInfo is the node's CLUSTER INFO, "" when it does not answer.
func (s *Server) clusterInfo(ctx context.Context) string {
	rdb := s.Client()
	defer rdb.Close()
	info, _ := rdb.ClusterInfo(ctx).Result()
	return info
}

// MasterOf is the running node that is now the master of key's slot (as that node itself and
// CLUSTER SLOTS on any running node say), or nil.
func (c *Cluster) MasterOf(ctx context.Context, key string) (*Server, error) {
	for _, s := range c.Nodes {
		if !s.proc.Running() {
			continue
		}
		rdb := s.Client()
		slot, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			rdb.Close()
			continue
		}
		slots, err := rdb.ClusterSlots(ctx).Result()
		rdb.Close()
		if err != nil {
			continue
		}
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
				for _, n := range c.Nodes {
					if n.Addr() == r.Nodes[0].Addr && n.proc.Running() {
						return n, nil
					}
				}
			}
		}
		return nil, fmt.Errorf("redis cluster: no running master serves slot %d of %q", slot, key)
	}
	return nil, errors.New("redis cluster: no node answers")
}

// WaitMaster waits, for at most bound, until a running node is the master of key's slot — after
// its master was killed, until a replica has been promoted — and returns it.
func (c *Cluster) WaitMaster(ctx context.Context, key string, bound time.Duration) (*Server, error) {
	var m *Server
	err := poll(ctx, bound, "redis cluster: no running master took the slot of "+key, func() bool {
		var err error
		m, err = c.MasterOf(ctx, key)
		return err == nil
	})
	return m, err
}

// Client is a Cluster client over every node, with go-redis's defaults; the caller closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
}

// Kill kills every node.
func (c *Cluster) Kill() { Kill(c.Nodes...) }
