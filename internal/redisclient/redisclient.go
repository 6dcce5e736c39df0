// Package redisclient opens the service's Redis clients, one way for every mode a deployment
// runs Redis in — one server, independent servers locked by quorum (Redlock), a Redis Cluster,
// a Sentinel-managed master — and with the options every user of Redis here relies on: the
// admission scripts, the locks, release messages, sold-out resets, the sweeper and readiness.
package redisclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Mode is how an instance reaches Redis, which decides what one lock is and what survives
// a failover (docs/operations.md, "Redis modes").
type Mode string

const (
	// Single is one Redis: the lock and admission live on it.
	Single Mode = "single"
	// Redlock is several independent Redis instances — no replication between them — and a
	// lock is held when a majority granted it (Redlock); admission lives on the first.
	Redlock Mode = "redlock"
	// Cluster is one Redis Cluster, reached through its seed nodes: each SKU's keys share a
	// hash tag ({sku}), so one SKU's lock, counter and buyers sit on one master and its scripts
	// run there, while many SKUs spread over every master. One lock store: a lock is one key.
	Cluster Mode = "cluster"
	// Sentinel is a master with replicas, reached through its Sentinels, which name the
	// current master (and a new one after a failover). One lock store: a lock is one key.
	Sentinel Mode = "sentinel"
)

// ParseMode reads a mode; "" is the default for n addresses: single for one, redlock for
// more.
func ParseMode(s string, n int) (Mode, error) {
	if s == "" {
		if n > 1 {
			return Redlock, nil
		}
		return Single, nil
	}
	switch m := Mode(s); m {
	case Single, Redlock, Cluster, Sentinel:
		return m, nil
	}
	return "", fmt.Errorf("redis mode %q: want single, redlock, cluster or sentinel", s)
}

// Check says whether addrs and master fit the mode.
func (m Mode) Check(addrs []string, master string) error {
	switch {
	case len(addrs) == 0:
		return fmt.Errorf("redis mode %s needs addresses", m)
	case m == Single && len(addrs) > 1:
		return fmt.Errorf("redis mode single takes one address, not %d (several independent instances: redlock)", len(addrs))
	case m == Sentinel && master == "":
		return errors.New("redis mode sentinel needs the master name the Sentinels monitor")
	case m != Sentinel && master != "":
		return fmt.Errorf("a master name is for redis mode sentinel, not %s", m)
	}
	return nil
}

// New opens the clients of mode over addrs: one per address for single and
// redlock (NewSingle), one Cluster client over the seed nodes, or one client of the master
// the Sentinels at addrs name for master. The first client holds admission, release messages
// and sold-out resets; all of them vote on locks. Every client is configured as NewSingle
// explains: context deadlines bound socket I/O, short timeouts, no command retries.
func New(mode Mode, addrs []string, master string) ([]redis.UniversalClient, error) {
	if err := mode.Check(addrs, master); err != nil {
		return nil, err
	}
	switch mode {
	case Cluster:
		return []redis.UniversalClient{redis.NewClusterClient(clientOptions(addrs, "").Cluster())}, nil
	case Sentinel:
		return []redis.UniversalClient{redis.NewFailoverClient(clientOptions(addrs, master).Failover())}, nil
	}
	out := make([]redis.UniversalClient, len(addrs))
	for i, addr := range addrs {
		out[i] = NewSingle(addr)
	}
	return out, nil
}

// Ping is the readiness check of one client: a Cluster is ready when every slot is
// served (cluster_state:ok, the state in which every SKU can be admitted and locked), any other
// client when its server (for Sentinel: the current master) answers PING.
func Ping(c redis.UniversalClient) func(context.Context) error {
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

// CheckName is how readiness names client: by its address, as a Cluster by its seed
// nodes, or as the master its Sentinels name.
func CheckName(c redis.UniversalClient) string {
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

// NewSingle returns a client of one Redis server, configured the way the service needs it: context
// deadlines bound socket I/O (go-redis ignores them otherwise), short timeouts, one dial
// attempt (go-redis would retry a refused dial five times, 100 ms apart, and a Redlock try waits
// for its slowest node), and no command retries — a retried admission script after a lost answer
// would see its own first run and call the buyer a repeat buyer.
func NewSingle(addr string) *redis.Client {
	return redis.NewClient(clientOptions([]string{addr}, "").Simple())
}

// clientOptions are the options of every Redis client (NewSingle, New) over
// addrs — Sentinels when master is set — as NewSingle explains them. RESP2, not go-redis's
// default RESP3: nothing here uses RESP3's push notifications, and with RESP3 the client looks
// for pending ones around every command, one of the larger costs of an order's admission in a
// CPU profile of the service (docs/performance.md).
func clientOptions(addrs []string, master string) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:                 addrs,
		MasterName:            master,
		Protocol:              2,
		ContextTimeoutEnabled: true,
		DialTimeout:           500 * time.Millisecond,
		DialerRetries:         1,
		DialerRetryTimeout:    10 * time.Millisecond,
		ReadTimeout:           500 * time.Millisecond,
		WriteTimeout:          500 * time.Millisecond,
		// No retries of a command that failed; on a Cluster a MOVED or ASK answer is still
		// followed (MaxRedirects), since the command did not run.
		MaxRetries: -1,
		PoolSize:   64,
	}
}
