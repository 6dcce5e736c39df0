package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/stock"
)

// config is the service configuration: the instance's (app.Config) and what only the command
// has, the log format and pprof. Every setting is a flag, and an environment variable named
// after it (addr -> SECKILL_ADDR): the flag wins over the variable, the variable over the
// default, and the defaults are app.Defaults().
type config struct {
	app.Config
	LogFormat string
	PprofAddr string

	flags          *flag.FlagSet
	tokenGenerated bool // AdminToken was made up at start and must be printed once
}

// secrets are never printed.
var secrets = map[string]bool{"mysql-dsn": true, "admin-token": true}

// envName is the environment variable of a flag.
func envName(flagName string) string {
	return "SECKILL_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// loadConfig reads the environment through getenv, then the flags in args, then validates.
func loadConfig(args []string, getenv func(string) string) (*config, error) {
	ad := app.Defaults()
	c := &config{Config: ad, flags: flag.NewFlagSet("seckill", flag.ContinueOnError)} // what no setting names stays ad's
	fs := c.flags
	fs.SetOutput(io.Discard)
	d, sc := ad.Service, &c.Service
	fs.StringVar(&c.Addr, "addr", ad.Addr, "listen address")
	fs.StringVar(&sc.Strategy, "strategy", d.Strategy, "default strategy")
	fs.StringVar(&c.MySQLDSN, "mysql-dsn", "", "MySQL/MariaDB DSN; empty: the embedded SQLite store in the data dir")
	fs.IntVar(&c.DBMaxConns, "db-max-conns", ad.DBMaxConns, "connection pool size of this instance (MySQL: mind max_connections across replicas)")
	fs.DurationVar(&c.DBIdleTx, "db-idle-tx", ad.DBIdleTx,
		"MySQL/MariaDB: the server ends a transaction of this instance idle this long (a frozen holder's row lock); whole seconds")
	fs.Var((*list)(&c.RedisAddrs), "redis-addrs",
		"comma-separated Redis host:port; several = independent instances locked by quorum (Redlock); empty: an embedded Redis")
	redisMode := fs.String("redis-mode", "",
		"what the Redis addresses are: single, redlock (independent instances, quorum), cluster (seed nodes of a Redis Cluster), "+
			"sentinel (Sentinels); empty: single for one address, redlock for several")
	fs.StringVar(&c.RedisMaster, "redis-master", "", "the master name the Sentinels monitor (redis-mode sentinel)")
	fs.Var((*list)(&c.EtcdEndpoints), "etcd-endpoints", "comma-separated etcd client URLs; empty: an etcd server embedded in the process")
	fs.Var((*list)(&c.ZKServers), "zk-servers",
		"comma-separated ZooKeeper host:port of one ensemble, for the zookeeper strategy (session timeout: the lock TTL); empty: not offered")
	fs.Var((*list)(&c.Queue.URLs), "nats-urls",
		"comma-separated NATS server URLs (a JetStream cluster), the order queue of the queued strategy; empty: a NATS server embedded in the process, in the data dir")
	fs.StringVar(&c.AdminToken, "admin-token", "", "admin bearer token; empty: a random one, printed once")
	fs.StringVar(&c.DataDir, "data-dir", ad.DataDir, "where embedded backends keep their files")
	fs.BoolVar(&sc.AllowUnsafe, "allow-unsafe", d.AllowUnsafe, "allow the unsafe strategies (naive, unguarded-*)")
	fs.BoolVar(&sc.StrategyOverride, "strategy-override", d.StrategyOverride, "allow the per-request strategy field")
	fs.DurationVar(&sc.LockTTL, "lock-ttl", d.LockTTL, "lock expiry, extended while held: how soon a stopped holder's lock is free again")
	fs.DurationVar(&sc.LockWait, "lock-wait", d.LockWait, "how long an order waits for a lock before answering busy")
	fs.DurationVar(&sc.LockExtend, "lock-extend", d.LockExtend, "how often a watchdog extends a held lock; 0: a third of the lock TTL")
	fs.DurationVar(&sc.LockPoll, "lock-poll", d.LockPoll, "how often a waiter tries a taken Redis lock between release messages; 0: every 1-5 ms, jittered")
	fs.DurationVar(&sc.NaivePause, "naive-pause", d.NaivePause, "naive strategy: pause between read and write (the race window)")
	fs.DurationVar(&sc.SlowHold, "slow-hold", d.SlowHold, "warn and count when a lock is held longer than this")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", ad.ShutdownTimeout, "how long shutdown waits for in-flight requests")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.IntVar(&sc.GroupCommit, "group-commit", d.GroupCommit, "place up to this many queued orders of a SKU in one critical section; 0 or 1: one order per section")
	fs.IntVar(&sc.AdmitBatch, "admit-batch", d.AdmitBatch,
		"hybrid and queued: answer up to this many buyers of a SKU in one Redis admission call, those who arrive while its last call is out; 0 or 1: one call per buyer")
	fs.IntVar(&sc.QueuedMaxWaiting, "queued-max-waiting", d.QueuedMaxWaiting,
		"queued: the most orders of a SKU accepted and not yet written or rejected, on all instances; past it an order is answered busy (429), so none waits behind more; 0: only the queue's bound")
	rowLock := fs.String("row-lock", d.RowLock.String(),
		"pessimistic: nowait (SELECT ... FOR UPDATE NOWAIT, a held row tried again until the lock wait runs out) or wait (in the row's lock queue); SQLite: no difference")
	fs.DurationVar(&sc.InstanceTTL, "instance-ttl", d.InstanceTTL,
		"hybrid: how long after an instance's last heartbeat (sent every quarter of this) the others return its Redis reservations, unless the database has their orders")
	fs.DurationVar(&sc.SoldOutFlag, "sold-out-flag", d.SoldOutFlag,
		"answer sold-out products from a local flag, checked against the database at least this often; 0: off")
	fs.StringVar(&c.PprofAddr, "pprof-addr", "", "serve net/http/pprof on this address (keep it on loopback); empty: off")
	fs.Float64Var(&c.RateLimit, "rate-limit", 0, "per-client requests/s to the API (token bucket); 0: off")
	fs.IntVar(&c.RateBurst, "rate-burst", 0, "per-client burst; default: twice the rate")
	fs.StringVar(&c.Buyers.JWKS, "buyer-jwks", "",
		"JWKS file path or http(s):// URL of the keys buyer tokens are signed with; empty: buyers not authenticated (a body's user_id is trusted)")
	fs.StringVar(&c.Buyers.Audience, "buyer-audience", "", "the aud a buyer token must carry; empty: any")
	fs.Float64Var(&c.Buyers.Rate, "buyer-rate", 0, "requests a second per buyer, across all instances (needs buyer-jwks); 0: no per-buyer limit")
	fs.IntVar(&c.Buyers.Burst, "buyer-burst", 0, "per-buyer burst; 0: the rate rounded up")
	fs.IntVar(&c.EventsMax, "events-max", ad.EventsMax,
		"the most sale-page event streams open on this instance at once; past it a watcher is answered 503")
	fs.Var((*list)(&c.TrustedProxies), "trusted-proxies", "proxies (CIDRs or addresses) whose X-Forwarded-For names the client; empty: none")

	if getenv("SECKILL_RESERVATION_LEASE") != "" {
		// A fixed lease per reservation is gone: it froze the end of a sale behind a stopped
		// instance (README, No frozen sale). Saying so beats ignoring the setting.
		return nil, errors.New("SECKILL_RESERVATION_LEASE is gone: a Redis reservation now lives as long as its instance's heartbeat; set SECKILL_INSTANCE_TTL instead")
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" && err == nil {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", envName(f.Name), v, serr)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("flags: %w", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return nil, fmt.Errorf("log format %q: want text or json", c.LogFormat)
	}
	for name, addrs := range map[string][]string{"redis-addrs": c.RedisAddrs, "zk-servers": c.ZKServers} {
		for _, addr := range addrs {
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return nil, fmt.Errorf("%s: %q: %w", envName(name), addr, err)
			}
		}
	}
	if len(c.RedisAddrs) == 0 && (*redisMode != "" || c.RedisMaster != "") {
		return nil, errors.New("redis-mode and redis-master need redis-addrs: the embedded Redis is a single one")
	}
	if c.RedisMode, err = redisclient.ParseMode(*redisMode, len(c.RedisAddrs)); err != nil {
		return nil, err
	}
	if len(c.RedisAddrs) > 0 {
		if err := c.RedisMode.Check(c.RedisAddrs, c.RedisMaster); err != nil {
			return nil, err
		}
	}
	if sc.GroupCommit < 0 || sc.AdmitBatch < 0 || sc.QueuedMaxWaiting < 0 {
		return nil, errors.New("group-commit, admit-batch and queued-max-waiting must not be negative")
	}
	if sc.RowLock, err = stock.ParseRowWait(*rowLock); err != nil {
		return nil, fmt.Errorf("%s: %w", envName("row-lock"), err)
	}
	if sc.SoldOutFlag < 0 {
		return nil, errors.New("sold-out-flag must not be negative")
	}
	if c.RateLimit < 0 || c.RateBurst < 0 {
		return nil, errors.New("rate-limit and rate-burst must not be negative")
	}
	if c.Buyers.Rate < 0 || c.Buyers.Burst < 0 {
		return nil, errors.New("buyer-rate and buyer-burst must not be negative")
	}
	if c.Buyers.JWKS == "" && (c.Buyers.Rate > 0 || c.Buyers.Audience != "") {
		return nil, errors.New("buyer-rate and buyer-audience need buyer-jwks: without identity a buyer is any name a body writes")
	}
	if c.RateBurst == 0 {
		c.RateBurst = int(2 * c.RateLimit)
	}
	if c.EventsMax < 1 {
		return nil, errors.New("events-max must be at least 1")
	}
	if c.DBMaxConns < 1 {
		return nil, errors.New("db-max-conns must be at least 1")
	}
	if sc.LockTTL <= 0 || sc.LockWait <= 0 || c.ShutdownTimeout <= 0 || sc.SlowHold <= 0 || sc.InstanceTTL <= 0 || c.DBIdleTx < time.Second {
		return nil, errors.New("durations must be positive (db-idle-tx at least 1s)")
	}
	if sc.LockExtend >= sc.LockTTL {
		return nil, errors.New("lock-extend must be shorter than lock-ttl, or the lock expires between extensions")
	}
	if sc.NaivePause < 0 || sc.LockExtend < 0 || sc.LockPoll < 0 {
		return nil, errors.New("durations must not be negative")
	}
	if c.AdminToken == "" {
		c.AdminToken = randomToken()
		c.tokenGenerated = true
	}
	return c, nil
}

// list is a comma-separated flag value; blanks are dropped.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }

func (l *list) Set(v string) error {
	*l = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error on supported platforms
	return hex.EncodeToString(b)
}

// print writes the effective configuration with secrets masked.
func (c *config) print(w io.Writer) {
	fmt.Fprintln(w, "seckill configuration:")
	c.flags.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		if secrets[f.Name] && v != "" {
			v = "****"
		}
		fmt.Fprintf(w, "  %-26s %s\n", envName(f.Name), v)
	})
}
