package backendtest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/devserver/mariadbserver"
)

// MariaDBProcess is a mariadbd of the test's own, on its own port and data dir, for faults that
// must not touch the shared server: stop it, start it again.
type MariaDBProcess struct {
	DSN    string // root, database seckill, parseTime
	t      testing.TB
	server *mariadbserver.Server
}

// StartMariaDB initialises a data dir and starts mariadbd on a free loopback port, with an empty
// database seckill; it is stopped in t.Cleanup. Without mariadbd the test fails when backends
// are required, and is skipped (saying why) otherwise.
func StartMariaDB(t testing.TB) *MariaDBProcess {
	t.Helper()
	if err := mariadbserver.Available(); err != nil {
		if Required() {
			t.Fatalf("MariaDB is required (SECKILL_TEST_REQUIRE_BACKENDS=1) but not installed: %v", err)
		}
		t.Skipf("this fault test needs a MariaDB server of its own: %v", err)
	}
	s, err := mariadbserver.New(t.TempDir())
	require.NoError(t, err)
	p := &MariaDBProcess{t: t, server: s}
	p.Start()
	t.Cleanup(p.Stop)
	require.NoError(t, s.Exec(context.Background(), "CREATE DATABASE seckill CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
	p.DSN = s.DSN("seckill")
	return p
}

// Start starts (or restarts) the server on its port and data dir, and waits until it answers.
func (p *MariaDBProcess) Start() {
	p.t.Helper()
	require.NoError(p.t, p.server.Start())
}

// Stop shuts the server down (SIGTERM: InnoDB flushes and stops, as a restart would) and waits.
func (p *MariaDBProcess) Stop() { p.server.Stop() }
