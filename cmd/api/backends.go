package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flashsale/seckill/devserver/etcdserver"
	"github.com/flashsale/seckill/internal/embeddedetcd"
	"github.com/flashsale/seckill/internal/lock/etcdlock"
	"github.com/flashsale/seckill/internal/lock/zklock"
	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/stock"
)

// openStore opens MySQL when a DSN is configured, else the embedded SQLite file, and says which.
func openStore(ctx context.Context, cfg *config, stdout io.Writer) (*stock.Store, error) {
	if cfg.MySQLDSN != "" {
		store, err := stock.OpenMySQL(ctx, cfg.MySQLDSN, stock.Options{MaxOpenConns: cfg.DBMaxConns, LockWait: cfg.Service.LockWait, IdleTx: cfg.DBIdleTx})
		if err != nil {
			return nil, err
		}
		fmt.Fprintln(stdout, "database: MySQL/MariaDB (SECKILL_MYSQL_DSN)")
		return store, nil
	}
	store, err := stock.OpenSQLite(ctx, cfg.sqlitePath(), stock.Options{MaxOpenConns: cfg.DBMaxConns, LockWait: cfg.Service.LockWait, IdleTx: cfg.DBIdleTx})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "database: embedded SQLite at %s (set SECKILL_MYSQL_DSN for MySQL/MariaDB)\n", cfg.sqlitePath())
	return store, nil
}

// redisBackend is the Redis side of an instance: the clients of the configured mode — the first
// also holds the admission state, all of them vote on locks — or one embedded Redis.
type redisBackend struct {
	clients  []redis.UniversalClient
	embedded *miniredis.Miniredis
}

// openRedis connects to the configured Redis instances, or starts an embedded one (miniredis,
// in-process, on a free loopback port) when none is configured. A Redis that does not answer at
// start is not fatal: the hybrid strategy falls back to the database-guarded path until it does.
func openRedis(ctx context.Context, cfg *config, stdout io.Writer, log *slog.Logger) (*redisBackend, error) {
	b := &redisBackend{}
	addrs := cfg.RedisAddrs
	if len(addrs) == 0 {
		b.embedded = miniredis.NewMiniRedis()
		b.embedded.ClockTTL(true) // TTLs run out with the wall clock, as in Redis (lock expiry)
		if err := b.embedded.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("start embedded redis: %w", err)
		}
		addrs = []string{b.embedded.Addr()}
		fmt.Fprintf(stdout, "redis: embedded (miniredis) at %s (set SECKILL_REDIS_ADDRS for real Redis)\n", b.embedded.Addr())
	} else {
		fmt.Fprintf(stdout, "redis: %s (SECKILL_REDIS_ADDRS, SECKILL_REDIS_MODE)\n", redisText(cfg))
	}
	clients, err := redisclient.New(cfg.RedisMode, addrs, cfg.RedisMaster)
	if err != nil {
		b.Close()
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

func (b *redisBackend) Close() {
	for _, c := range b.clients {
		_ = c.Close()
	}
	if b.embedded != nil {
		b.embedded.Close()
	}
}

// redisText says what the configured Redis is, and what a lock is on it.
func redisText(cfg *config) string {
	addrs := strings.Join(cfg.RedisAddrs, ",")
	switch cfg.RedisMode {
	case redisclient.Redlock:
		return fmt.Sprintf("%d independent instances %s, locks by quorum of %d (Redlock); admission on %s",
			len(cfg.RedisAddrs), addrs, len(cfg.RedisAddrs)/2+1, cfg.RedisAddrs[0])
	case redisclient.Cluster:
		return "Redis Cluster, seed nodes " + addrs + "; each SKU's keys on the master of its hash tag's slot"
	case redisclient.Sentinel:
		return fmt.Sprintf("the master Sentinels %s name for %q", addrs, cfg.RedisMaster)
	}
	return addrs
}

// etcdBackend is the etcd side of an instance: a client, and the in-process server when none
// is configured.
type etcdBackend struct {
	client   *clientv3.Client
	embedded *etcdserver.Member
}

// openEtcd connects to the configured etcd cluster, or starts a real etcd server in-process
// (server/v3/embed) in the data dir, on free loopback ports, fresh at every start.
func openEtcd(cfg *config, stdout io.Writer) (*etcdBackend, error) {
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
		fmt.Fprintf(stdout, "etcd: embedded at %s, data in %s (set SECKILL_ETCD_ENDPOINTS for an etcd cluster)\n", m.ClientURL, dir)
	} else {
		fmt.Fprintf(stdout, "etcd: %s (SECKILL_ETCD_ENDPOINTS)\n", strings.Join(endpoints, ","))
	}
	c, err := etcdlock.NewClient(endpoints)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	b.client = c
	return b, nil
}

func (b *etcdBackend) Close() {
	if b.client != nil {
		_ = b.client.Close()
	}
	if b.embedded != nil {
		b.embedded.Close()
	}
}

// openZooKeeper connects to the configured ensemble, one session per instance; with none
// configured it returns nil and the zookeeper strategy is not offered (there is no embedded
// ZooKeeper: it is a Java server).
func openZooKeeper(cfg *config, stdout io.Writer, log *slog.Logger) (*zk.Conn, error) {
	if len(cfg.ZKServers) == 0 {
		return nil, nil
	}
	conn, err := zklock.Dial(cfg.ZKServers, cfg.Service.LockTTL, log)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "zookeeper: %s (SECKILL_ZK_SERVERS), session timeout %s\n", strings.Join(cfg.ZKServers, ","), cfg.Service.LockTTL)
	return conn, nil
}
