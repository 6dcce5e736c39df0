// Package backendtest gives tests real backends. It connects once per test process to MariaDB
// (127.0.0.1:3306 as root, or SECKILL_TEST_MYSQL_DSN) and Redis (127.0.0.1:6379, or
// SECKILL_TEST_REDIS_ADDR), creates a fresh database for the process, migrates it once, and
// isolates tests by data: each test gets unique SKUs, whose rows and Redis keys are removed in
// t.Cleanup. etcd is a real etcd server started in-process, once per test process; ZooKeeper a
// real server process, started once per test process by the first test that asks for it. When
// a backend cannot be reached it falls back to the embedded one (SQLite, miniredis), and a test
// needing ZooKeeper where it is not installed is skipped, saying so — unless
// SECKILL_TEST_REQUIRE_BACKENDS=1 (as in CI), where a missing backend fails the test instead.
// Fault tests get throwaway servers of their own (StartRedis, StartZooKeeperEnsemble).
// Service instances (NewInstance, Open) are built by package app, the composition root of
// cmd/api, from cmd/api's configuration pointed at these backends (AppConfig).
//
// A test package using it calls Main from its TestMain, so the database is dropped at the end.
package backendtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/stock"
)

const dbPrefix = "seckill_test_"

var (
	once      sync.Once
	setup     backend
	initErr   error
	connected atomic.Bool // connect has run: setup may be read without once
)

// backend is what the process connected to: a MySQL DSN, or an SQLite file.
type backend struct {
	mysqlDSN   string // with the per-process database selected
	sqlitePath string
	admin      *sql.DB // server connection used to drop the database at the end
	dbName     string
}

// Required reports whether tests must use real backends (SECKILL_TEST_REQUIRE_BACKENDS=1).
func Required() bool { return os.Getenv("SECKILL_TEST_REQUIRE_BACKENDS") == "1" }

// Screenshot is the file a browser test writes its picture to (SECKILL_TEST_SCREENSHOT); empty:
// none.
func Screenshot() string { return os.Getenv("SECKILL_TEST_SCREENSHOT") }

// Main runs the package's tests and then drops the per-process database. after runs first:
// what the package's own tests leave for the whole test process (cmd/api's service binary).
func Main(m *testing.M, after ...func()) {
	code := m.Run()
	for _, f := range after {
		f()
	}
	if setup.admin != nil {
		_, _ = setup.admin.Exec("DROP DATABASE IF EXISTS `" + setup.dbName + "`")
		_ = setup.admin.Close()
	}
	if setup.sqlitePath != "" {
		_ = os.RemoveAll(filepath.Dir(setup.sqlitePath))
	}
	stopEtcd()
	stopZooKeeper()
	stopGalera()
	dropQueue()
	stopProcessNATS()
	os.Exit(code)
}

func connect() {
	defer connected.Store(true)
	serverDSN := os.Getenv("SECKILL_TEST_MYSQL_DSN")
	if serverDSN == "" {
		serverDSN = "root:@tcp(127.0.0.1:3306)/"
	}
	cfg, err := mysql.ParseDSN(serverDSN)
	if err != nil {
		initErr = fmt.Errorf("SECKILL_TEST_MYSQL_DSN: %w", err)
		return
	}
	cfg.DBName, cfg.Timeout = "", 3*time.Second
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = admin.PingContext(ctx)
		cancel()
	}
	if err != nil {
		if admin != nil {
			_ = admin.Close()
		}
		if Required() {
			initErr = fmt.Errorf("MariaDB at %s is required (SECKILL_TEST_REQUIRE_BACKENDS=1) but unreachable: %w", cfg.Addr, err)
			return
		}
		// A server that answered and refused (a password, a missing grant) is there: falling
		// back to SQLite would run every test on the wrong database without a word.
		var refused *mysql.MySQLError
		if errors.As(err, &refused) {
			initErr = fmt.Errorf("MariaDB at %s refused the tests (%w): set SECKILL_TEST_MYSQL_DSN, e.g. user:password@tcp(127.0.0.1:3306)/", cfg.Addr, err)
			return
		}
		useSQLite()
		return
	}
	dropAbandoned(admin)
	setup.dbName = fmt.Sprintf("%s%d_%s", dbPrefix, os.Getpid(), randomHex(4))
	if _, err := admin.Exec("CREATE DATABASE `" + setup.dbName + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		initErr = fmt.Errorf("create test database: %w", err)
		return
	}
	setup.admin = admin
	cfg.DBName, cfg.Timeout = setup.dbName, 0
	setup.mysqlDSN = cfg.FormatDSN()
	initErr = migrate()
}

// dropAbandoned drops the databases of earlier test processes that died before Main ran.
func dropAbandoned(admin *sql.DB) {
	rows, err := admin.Query("SHOW DATABASES LIKE '" + dbPrefix + "%'")
	if err != nil {
		return
	}
	var stale []string
	for rows.Next() {
		var name string
		if rows.Scan(&name) != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(name, dbPrefix), "_", 2)[0])
		if _, statErr := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil && os.IsNotExist(statErr) {
			stale = append(stale, name)
		}
	}
	_ = rows.Close()
	for _, name := range stale {
		_, _ = admin.Exec("DROP DATABASE IF EXISTS `" + name + "`")
	}
}

func useSQLite() {
	dir, err := os.MkdirTemp("", "seckill-test-")
	if err != nil {
		initErr = err
		return
	}
	setup.sqlitePath = filepath.Join(dir, "seckill.db")
	initErr = migrate()
}

func migrate() error {
	s, err := open(context.Background())
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Migrate(context.Background(), slog.New(slog.DiscardHandler))
}

// poolSize keeps each test store's pool small: the packages' tests run in parallel against one
// MariaDB, whose default max_connections is 151. It is cmd/api's SECKILL_DB_MAX_CONNS.
const poolSize = 8

// storeConfig is cmd/api's default configuration on the process's test database.
func storeConfig() app.Config {
	c := app.Defaults()
	c.DBMaxConns = poolSize
	if setup.mysqlDSN != "" {
		c.MySQLDSN = setup.mysqlDSN
	} else {
		c.DataDir = filepath.Dir(setup.sqlitePath)
	}
	return c
}

// open opens a store on the test database as an instance of cmd/api's default configuration
// opens its own.
func open(ctx context.Context) (*stock.Store, error) {
	return app.OpenStore(ctx, storeConfig(), io.Discard)
}

// AppConfig is cmd/api's default configuration (app.Defaults) pointed at the test backends —
// the database, the shared Redis, the process's etcd, the process's order queue — with the
// small pool every test store has. Tests change what they are about, as a user would change a
// setting of cmd/api.
func AppConfig(t testing.TB) app.Config {
	t.Helper()
	ready(t)
	c := storeConfig()
	c.RedisAddrs = []string{RedisAddr(t)}
	c.EtcdEndpoints = EtcdEndpoints(t)
	c.Queue = instanceQueue(t)
	return c
}

func ready(t testing.TB) {
	t.Helper()
	once.Do(connect)
	require.NoError(t, initErr, "test backends")
}

// Store returns a new Store with its own connection pool on the process's test database, as a
// separate service instance would have. It is closed in t.Cleanup.
func Store(t testing.TB) *stock.Store {
	t.Helper()
	ready(t)
	s, err := open(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Dialect reports which database the tests run on.
func Dialect(t testing.TB) stock.Dialect {
	t.Helper()
	ready(t)
	if setup.mysqlDSN != "" {
		return stock.MySQL
	}
	return stock.SQLite
}

// SQL returns a plain database/sql handle on the test database, closed in t.Cleanup, for tests
// that must act as another client outside the store (hold a row lock, say).
func SQL(t testing.TB) *sql.DB {
	t.Helper()
	ready(t)
	driver, dsn := "mysql", setup.mysqlDSN
	if dsn == "" {
		driver, dsn = "sqlite", "file:"+setup.sqlitePath+"?_pragma=busy_timeout(5000)"
	}
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// NeedMySQL skips the test, saying why, on the embedded store — or fails it when backends are
// required.
func NeedMySQL(t testing.TB, why string) {
	t.Helper()
	if Dialect(t) != stock.MySQL {
		if Required() {
			t.Fatal("this test needs MariaDB")
		}
		t.Skip(why)
	}
}

// HoldRow takes sku's product row (SELECT ... FOR UPDATE) in a transaction of another client —
// a plain connection of SQL, outside every store — and returns that client's connection, closed
// at cleanup: ROLLBACK on it frees the row. MySQL/MariaDB only (NeedMySQL).
func HoldRow(t testing.TB, sku string) *sql.Conn {
	t.Helper()
	ctx := context.Background()
	other, err := SQL(t).Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	_, err = other.ExecContext(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = other.ExecContext(ctx, "SELECT stock FROM products WHERE sku = ? FOR UPDATE", sku)
	require.NoError(t, err)
	return other
}

// Env returns the environment that points a service process at the test backends:
// SECKILL_MYSQL_DSN (or SECKILL_DATA_DIR of the embedded SQLite file), SECKILL_REDIS_ADDRS,
// SECKILL_ETCD_ENDPOINTS and SECKILL_NATS_URLS (the test process's own NATS server).
func Env(t testing.TB) []string {
	t.Helper()
	ready(t)
	env := []string{"SECKILL_REDIS_ADDRS=" + RedisAddr(t), "SECKILL_ETCD_ENDPOINTS=" + strings.Join(EtcdEndpoints(t), ","),
		"SECKILL_NATS_URLS=" + processNATSURL(t)}
	if setup.mysqlDSN != "" {
		return append(env, "SECKILL_MYSQL_DSN="+setup.mysqlDSN)
	}
	return append(env, "SECKILL_DATA_DIR="+filepath.Dir(setup.sqlitePath))
}

// SKU returns a SKU unique to this test and run. The product and its orders are deleted in
// t.Cleanup, so tests sharing the database never see each other's rows.
func SKU(t testing.TB) string {
	t.Helper()
	h := fnv.New32a()
	_, _ = h.Write([]byte(t.Name()))
	sku := fmt.Sprintf("t%08x-%s", h.Sum32(), randomHex(4))
	t.Cleanup(func() {
		// A test that never asked for the database has no product to delete, and opening one
		// here would create an SQLite file in the package's directory.
		if connected.Load() && initErr == nil {
			if s, err := open(context.Background()); err == nil {
				_ = s.DeleteProduct(context.Background(), sku)
				_ = s.Close()
			}
		}
		deleteRedisKeys(sku)
	})
	return sku
}

// RequireInvariant checks the invariant (the README's "The invariant") on sku's audit — over
// active orders — and that every order in acked (the 201s answered to clients and kept: not
// cancelled or expired since) is an active row in the database, each exactly once.
func RequireInvariant(t testing.TB, s *stock.Store, sku string, acked []stock.Order) stock.Audit {
	t.Helper()
	ctx := context.Background()
	a, err := s.Audit(ctx, sku)
	require.NoError(t, err)
	require.GreaterOrEqual(t, a.Stock, int64(0), "stock went negative: %+v", a)
	require.Equal(t, a.InitialStock, a.Stock+a.OrderedQuantity, "stock + ordered != initial: %+v", a)
	require.Equal(t, a.Orders, a.DistinctBuyers, "a user holds two orders: %+v", a)
	require.Zero(t, a.Oversold(), "oversold: %+v", a)
	require.True(t, a.Consistent(), "%+v", a)
	seen := map[string]bool{}
	for _, o := range acked {
		require.False(t, seen[o.OrderID], "order %s acknowledged twice", o.OrderID)
		seen[o.OrderID] = true
		got, err := s.Order(ctx, o.OrderID)
		require.NoError(t, err, "acknowledged order %s has no row", o.OrderID)
		require.Equal(t, o.UserID, got.UserID)
		require.True(t, got.Status.Active(), "acknowledged order %s is %s", o.OrderID, got.Status)
	}
	require.Equal(t, int64(len(acked)), a.Orders, "orders in the database != orders acknowledged")
	return a
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
