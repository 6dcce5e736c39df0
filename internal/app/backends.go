package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flashsale/seckill/devserver/etcdserver"
	"github.com/flashsale/seckill/internal/embeddedetcd"
	"github.com/flashsale/seckill/internal/lock/etcdlock"
	"github.com/flashsale/seckill/internal/lock/zklock"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/stock"
)

// OpenStore opens the store cfg names — MySQL when a DSN is configured, else the embedded
// SQLite file in the data dir — with the options every instance's store has, and says which on
// out. It does not migrate. Open uses it; so does a tool that needs the database the way an
// instance has it (the test fixtures' stores, the lab's own reads and writes).
func OpenStore(ctx context.Context, cfg Config, out io.Writer) (*stock.Store, error) {
	if cfg.MySQLDSN != "" {
		store, err := stock.OpenMySQL(ctx, cfg.MySQLDSN, cfg.StoreOptions())
		if err != nil {
			return nil, err
		}
		fmt.Fprintln(out, "database: MySQL/MariaDB (SECKILL_MYSQL_DSN)")
		return store, nil
	}
	path := SQLitePath(cfg.DataDir)
	store, err := stock.OpenSQLite(ctx, path, cfg.StoreOptions())
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "database: embedded SQLite at %s (set SECKILL_MYSQL_DSN for MySQL/MariaDB)\n", path)
	return store, nil
}

// SQLitePath is where the embedded store of the data dir keeps its database.
func SQLitePath(dataDir string) string { return filepath.Join(dataDir, "seckill.db") }

// redisBackend is the Redis side of an instance: the clients of the configured mode — the first
// also holds the admission state, all of them vote on locks — or one embedded Redis.
type redisBackend struct {
	clients  []redis.UniversalClient
	embedded *miniredis.Miniredis
}

// openRedis connects to the configured Redis instances, or starts an embedded one (miniredis,
// in-process, on a free loopback port) when none is configured. A Redis that does not answer at
// start is not fatal: the hybrid strategy falls back to the database-guarded path until it does.
func openRedis(ctx context.Context, cfg Config, out io.Writer, log *slog.Logger) (*redisBackend, error) {
	b := &redisBackend{}
	addrs := cfg.RedisAddrs
	if len(addrs) == 0 {
		b.embedded = miniredis.NewMiniRedis()
		b.embedded.ClockTTL(true) // TTLs run out with the wall clock, as in Redis (lock expiry)
		if err := b.embedded.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("start embedded redis: %w", err)
		}
		addrs = []string{b.embedded.Addr()}
		fmt.Fprintf(out, "redis: embedded (miniredis) at %s (set SECKILL_REDIS_ADDRS for real Redis)\n", b.embedded.Addr())
	}
	mode := cfg.RedisMode
	if mode == "" {
		mode, _ = redisclient.ParseMode("", len(addrs)) // the default of a count never fails
	}
	if len(cfg.RedisAddrs) > 0 {
		fmt.Fprintf(out, "redis: %s (SECKILL_REDIS_ADDRS, SECKILL_REDIS_MODE)\n", redisText(mode, cfg.RedisAddrs, cfg.RedisMaster))
	}
	clients, err := redisclient.New(mode, addrs, cfg.RedisMaster)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	b.clients = clients
	for _, c := range clients {
		if err := redisclient.Ping(c)(ctx); err != nil {
			log.Warn("redis does not answer at start; hybrid orders take the database-guarded path until it does",
				"redis", redisclient.CheckName(c), "err", err)
		}
	}
	return b, nil
}

func (b *redisBackend) Close() error {
	for _, c := range b.clients {
		_ = c.Close()
	}
	if b.embedded != nil {
		b.embedded.Close()
	}
	return nil
}

// redisText says what the configured Redis is, and what a lock is on it.
func redisText(mode redisclient.Mode, addrs []string, master string) string {
	list := strings.Join(addrs, ",")
	switch mode {
	case redisclient.Redlock:
		return fmt.Sprintf("%d independent instances %s, locks by quorum of %d (Redlock); admission on %s",
			len(addrs), list, len(addrs)/2+1, addrs[0])
	case redisclient.Cluster:
		return "Redis Cluster, seed nodes " + list + "; each SKU's keys on the master of its hash tag's slot"
	case redisclient.Sentinel:
		return fmt.Sprintf("the master Sentinels %s name for %q", list, master)
	}
	return list
}

// etcdBackend is the etcd side of an instance: a client, and the in-process server when none
// is configured.
type etcdBackend struct {
	client   *clientv3.Client
	embedded *etcdserver.Member
}

// openEtcd connects to the configured etcd cluster, or starts a real etcd server in-process
// (server/v3/embed) in the data dir, on free loopback ports, fresh at every start.
func openEtcd(cfg Config, out io.Writer) (*etcdBackend, error) {
	b := &etcdBackend{}
	endpoints := cfg.EtcdEndpoints
	if len(endpoints) == 0 {
		dir := filepath.Join(cfg.DataDir, "etcd")
		m, err := embeddedetcd.Start(dir)
		if err != nil {
			return nil, fmt.Errorf("start embedded etcd: %w", err)
		}
		b.embedded = m
		endpoints = []string{m.ClientURL}
		fmt.Fprintf(out, "etcd: embedded at %s, data in %s (set SECKILL_ETCD_ENDPOINTS for an etcd cluster)\n", m.ClientURL, dir)
	} else {
		fmt.Fprintf(out, "etcd: %s (SECKILL_ETCD_ENDPOINTS)\n", strings.Join(endpoints, ","))
	}
	c, err := etcdlock.NewClient(endpoints)
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	b.client = c
	return b, nil
}

func (b *etcdBackend) Close() error {
	if b.client != nil {
		_ = b.client.Close()
	}
	if b.embedded != nil {
		b.embedded.Close()
	}
	return nil
}

// openZooKeeper connects to the configured ensemble, one session per instance whose timeout is
// the lock TTL; with none configured it returns nil and the zookeeper strategies are not offered
// (there is no embedded ZooKeeper: it is a Java server).
func openZooKeeper(cfg Config, out io.Writer, log *slog.Logger) (*zk.Conn, error) {
	if len(cfg.ZKServers) == 0 {
		return nil, nil
	}
	conn, err := zklock.Dial(cfg.ZKServers, cfg.Service.LockTTL, log)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "zookeeper: %s (SECKILL_ZK_SERVERS), session timeout %s\n", strings.Join(cfg.ZKServers, ","), cfg.Service.LockTTL)
	return conn, nil
}

// openQueue connects to the configured NATS servers, or starts a NATS server with JetStream
// embedded in the process, its store in the data dir (it keeps queued orders across a restart),
// and opens the order queue on it: its stream, its writers' consumer, its order records.
func openQueue(ctx context.Context, cfg Config, out io.Writer, log *slog.Logger, reg prometheus.Registerer) (*orderqueue.Queue, error) {
	qc := cfg.Queue
	if len(qc.URLs) == 0 && qc.DataDir == "" {
		qc.DataDir = cfg.DataDir
	}
	q, err := orderqueue.Open(ctx, qc, log, reg)
	if err != nil {
		return nil, fmt.Errorf("order queue: %w", err)
	}
	if len(qc.URLs) == 0 {
		fmt.Fprintf(out, "nats: embedded, JetStream in %s (set SECKILL_NATS_URLS for a NATS cluster)\n", filepath.Join(qc.DataDir, "nats"))
	} else {
		fmt.Fprintf(out, "nats: %s (SECKILL_NATS_URLS)\n", strings.Join(qc.URLs, ","))
	}
	return q, nil
}
