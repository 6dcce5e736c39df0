package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"time"
)

// config is the service configuration. Every setting is a flag, and an environment variable
// named after it (addr -> SECKILL_ADDR): the flag wins over the variable, the variable over the
// default.
type config struct {
	Addr             string
	Strategy         string
	MySQLDSN         string
	DBMaxConns       int
	RedisAddrs       []string
	EtcdEndpoints    []string
	AdminToken       string
	DataDir          string
	AllowUnsafe      bool
	StrategyOverride bool
	LockTTL          time.Duration
	LockWait         time.Duration
	NaivePause       time.Duration
	SlowHold         time.Duration
	ShutdownTimeout  time.Duration
	LogFormat        string
	GroupCommit      int
	SoldOutFlag      time.Duration
	PprofAddr        string
	RateLimit        float64
	RateBurst        int
	TrustedProxies   []string

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
	c := &config{flags: flag.NewFlagSet("seckill", flag.ContinueOnError)}
	fs := c.flags
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.Addr, "addr", ":8080", "listen address")
	fs.StringVar(&c.Strategy, "strategy", "hybrid", "default strategy")
	fs.StringVar(&c.MySQLDSN, "mysql-dsn", "", "MySQL/MariaDB DSN; empty: the embedded SQLite store in the data dir")
	fs.IntVar(&c.DBMaxConns, "db-max-conns", 32, "connection pool size of this instance (MySQL: mind max_connections across replicas)")
	fs.Var((*list)(&c.RedisAddrs), "redis-addrs",
		"comma-separated Redis host:port; several = independent instances locked by quorum (Redlock); empty: an embedded Redis")
	fs.Var((*list)(&c.EtcdEndpoints), "etcd-endpoints", "comma-separated etcd client URLs; empty: an etcd server embedded in the process")
	fs.StringVar(&c.AdminToken, "admin-token", "", "admin bearer token; empty: a random one, printed once")
	fs.StringVar(&c.DataDir, "data-dir", "./.seckill", "where embedded backends keep their files")
	fs.BoolVar(&c.AllowUnsafe, "allow-unsafe", false, "allow the naive strategy")
	fs.BoolVar(&c.StrategyOverride, "strategy-override", true, "allow the per-request strategy field")
	fs.DurationVar(&c.LockTTL, "lock-ttl", 10*time.Second, "lock expiry: how soon a crashed holder's lock is free again")
	fs.DurationVar(&c.LockWait, "lock-wait", 2*time.Second, "how long an order waits for a lock before answering busy")
	fs.DurationVar(&c.NaivePause, "naive-pause", 5*time.Millisecond, "naive strategy: pause between read and write (the race window)")
	fs.DurationVar(&c.SlowHold, "slow-hold", 500*time.Millisecond, "warn and count when a lock is held longer than this")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 15*time.Second, "how long shutdown waits for in-flight requests")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.IntVar(&c.GroupCommit, "group-commit", 64, "place up to this many queued orders of a SKU in one critical section; 0 or 1: one order per section")
	fs.DurationVar(&c.SoldOutFlag, "sold-out-flag", time.Second,
		"answer sold-out products from a local flag, checked against the database at least this often; 0: off")
	fs.StringVar(&c.PprofAddr, "pprof-addr", "", "serve net/http/pprof on this address (keep it on loopback); empty: off")
	fs.Float64Var(&c.RateLimit, "rate-limit", 0, "per-client requests/s to the API (token bucket); 0: off")
	fs.IntVar(&c.RateBurst, "rate-burst", 0, "per-client burst; default: twice the rate")
	fs.Var((*list)(&c.TrustedProxies), "trusted-proxies", "proxies (CIDRs or addresses) whose X-Forwarded-For names the client; empty: none")

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
	for _, addr := range c.RedisAddrs {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("SECKILL_REDIS_ADDRS: %q: %w", addr, err)
		}
	}
	if c.GroupCommit < 0 {
		return nil, errors.New("group-commit must not be negative")
	}
	if c.SoldOutFlag < 0 {
		return nil, errors.New("sold-out-flag must not be negative")
	}
	if c.RateLimit < 0 || c.RateBurst < 0 {
		return nil, errors.New("rate-limit and rate-burst must not be negative")
	}
	if c.RateBurst == 0 {
		c.RateBurst = int(2 * c.RateLimit)
	}
	if c.DBMaxConns < 1 {
		return nil, errors.New("db-max-conns must be at least 1")
	}
	if c.LockTTL <= 0 || c.LockWait <= 0 || c.ShutdownTimeout <= 0 || c.SlowHold <= 0 || c.NaivePause < 0 {
		return nil, errors.New("durations must be positive")
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

// sqlitePath is where the embedded store keeps its database.
func (c *config) sqlitePath() string { return filepath.Join(c.DataDir, "seckill.db") }

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
