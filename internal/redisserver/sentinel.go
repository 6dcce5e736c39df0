package redisserver

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/flashsale/seckill/internal/freeport"
)

// StartReplica starts one server in dir that replicates master (host:port — which may be a
// fault proxy in front of the real master, to hold or cut the replication link), and waits
// until it answers PING.
func StartReplica(dir, master string) (*Server, error) {
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

// StartSentinels starts n Sentinels in dir that watch master under name, with a quorum of a
// majority of them; a master that has not answered for downAfter is down for a Sentinel, and a
// failover that has not finished within twice the failover timeout may be tried again. Each
// Sentinel rewrites its configuration file as it learns the replicas and the other Sentinels.
func StartSentinels(dir string, n int, name, master string, downAfter time.Duration) ([]*Server, error) {
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
