package backendtest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// MariaDBProcess is a mariadbd of the test's own, on its own port and data dir, for faults that
// must not touch the shared server: stop it, start it again.
type MariaDBProcess struct {
	DSN  string // root, database seckill, parseTime
	t    testing.TB
	dir  string
	port int
	cmd  *exec.Cmd
}

// StartMariaDB initialises a data dir and starts mariadbd on a free loopback port, with an empty
// database seckill; it is stopped in t.Cleanup. Without mariadbd the test fails when backends
// are required, and is skipped (saying why) otherwise.
func StartMariaDB(t testing.TB) *MariaDBProcess {
	t.Helper()
	for _, bin := range []string{"mariadb-install-db", "mariadbd"} {
		if _, err := exec.LookPath(bin); err != nil {
			if Required() {
				t.Fatalf("%s is required (SECKILL_TEST_REQUIRE_BACKENDS=1) but not installed: %v", bin, err)
			}
			t.Skipf("%s not installed: this fault test needs a MariaDB server of its own: %v", bin, err)
		}
	}
	dir := t.TempDir()
	out, err := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+filepath.Join(dir, "data"), "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput()
	require.NoError(t, err, "mariadb-install-db: %s", out)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.ParseTime = "root", "tcp", fmt.Sprintf("127.0.0.1:%d", port), true
	p := &MariaDBProcess{t: t, dir: dir, port: port}
	p.Start()
	t.Cleanup(p.Stop)

	admin, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Exec("CREATE DATABASE seckill CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	require.NoError(t, err)
	cfg.DBName = "seckill"
	p.DSN = cfg.FormatDSN()
	return p
}

// Start starts (or restarts) the server on its port and data dir, and waits until it answers.
func (p *MariaDBProcess) Start() {
	p.t.Helper()
	p.cmd = exec.Command("mariadbd", "--no-defaults", "--datadir="+filepath.Join(p.dir, "data"), "--user=root",
		"--port="+strconv.Itoa(p.port), "--bind-address=127.0.0.1", "--socket="+filepath.Join(p.dir, "sock"),
		"--pid-file="+filepath.Join(p.dir, "pid"), "--skip-log-bin", "--innodb-buffer-pool-size=32M")
	require.NoError(p.t, p.cmd.Start())
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", fmt.Sprintf("127.0.0.1:%d", p.port)
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(p.t, err)
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return
		}
		require.True(p.t, time.Now().Before(deadline), "mariadbd on port %d did not answer in 30s: %v", p.port, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down (SIGTERM: InnoDB flushes and stops, as a restart would) and waits.
func (p *MariaDBProcess) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Wait()
	p.cmd = nil
}
