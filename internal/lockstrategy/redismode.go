package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisMode is how an instance reaches Redis, which decides what one lock is and what survives
// a failover (README, "Redis modes").
type RedisMode string

const (
	// RedisSingle is one Redis: the lock and admission live on it.
	RedisSingle RedisMode = "single"
	// RedisRedlock is several independent Redis instances — no replication between them — and a
	// lock is held when a majority granted it (Redlock); admission lives on the first.
	RedisRedlock RedisMode = "redlock"
	// RedisCluster is one Redis Cluster, reached through its seed nodes: each SKU's keys share a
	// hash tag ({sku}), so one SKU's lock, counter and buyers sit on one master and its scripts
	// run there, while many SKUs spread over every master. One lock store: a lock is one key.
	RedisCluster RedisMode = "cluster"
	// RedisSentinel is a master with replicas, reached through its Sentinels, which name the
	// current master (and a new one after a failover). One lock store: a lock is one key.
	RedisSentinel RedisMode = "sentinel"
)

// ParseRedisMode reads a mode; "" is the default for n addresses: single for one, redlock for
// more.
func ParseRedisMode(s string, n int) (RedisMode, error) {
	if s == "" {
		if n > 1 {
			return RedisRedlock, nil
		}
		return RedisSingle, nil
	}
	switch m := RedisMode(s); m {
	case RedisSingle, RedisRedlock, RedisCluster, RedisSentinel:
		return m, nil
	}
	return "", fmt.Errorf("redis mode %q: want single, redlock, cluster or sentinel", s)
}

// Check says whether addrs and master fit the mode.
func (m RedisMode) Check(addrs []string, master string) error {
	switch {
	case len(addrs) == 0:
		return fmt.Errorf("redis mode %s needs addresses", m)
	case m == RedisSingle && len(addrs) > 1:
		return fmt.Errorf("redis mode single takes one address, not %d (several independent instances: redlock)", len(addrs))
	case m == RedisSentinel && master == "":
		return errors.New("redis mode sentinel needs the master name the Sentinels monitor")
	case m != RedisSentinel && master != "":
		return fmt.Errorf("a master name is for redis mode sentinel, not %s", m)
	}
	return nil
}

// NewRedisClients opens the clients of mode over addrs: one per address for single and
// redlock (NewRedisClient), one Cluster client over the seed nodes, or one client of the master
// the Sentinels at addrs name for master. The first client holds admission, release messages
// and sold-out resets; all of them vote on locks. Every client is configured as NewRedisClient
// explains: context deadlines bound socket I/O, short timeouts, no command retries.
func NewRedisClients(mode RedisMode, addrs []string, master string) ([]redis.UniversalClient, error) {
	if err := mode.Check(addrs, master); err != nil {
		return nil, err
	}
	switch mode {
	case RedisCluster:
		return []redis.UniversalClient{redis.NewClusterClient(clientOptions(addrs, "").Cluster())}, nil
	case RedisSentinel:
		return []redis.UniversalClient{redis.NewFailoverClient(clientOptions(addrs, master).Failover())}, nil
	}
	out := make([]redis.UniversalClient, len(addrs))
	for i, addr := range addrs {
		out[i] = NewRedisClient(addr)
	}
	return out, nil
}

// PingRedis is the readiness check of one client: a Cluster is ready when every slot is
// served (cluster_state:ok, the state in which every SKU can be admitted and locked), any other
// client when its server (for Sentinel: the current master) answers PING.
func PingRedis(c redis.UniversalClient) func(context.Context) error {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return func(ctx context.Context) error { return c.Ping(ctx).Err() }
	}
	// Asked of every master that serves slots, not of a random node: a dead node that served
	// none since the failover stays in the client's list for a while, and says nothing.
	return func(ctx context.Context) error {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			info, err := m.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("redis cluster node %s: not every slot is served (cluster_state is not ok)", m.Options().Addr)
			}
			return nil
		})
	}
}

// RedisCheckName is how readiness names client: by its address, as a Cluster by its seed
// nodes, or as the master its Sentinels name.
func RedisCheckName(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return "redis cluster " + strings.Join(c.Options().Addrs, ",")
	case *redis.Client:
		if addr := c.Options().Addr; addr != failoverAddr {
			return "redis " + addr
		}
	}
	return "redis sentinel master"
}

// failoverAddr is the address go-redis gives the options of a client made by NewFailoverClient,
// whose real address is the master's, asked of the Sentinels at each dial.
const failoverAddr = "FailoverClient"
