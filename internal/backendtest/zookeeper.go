package backendtest

import (
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/devserver/zkserver"
	"github.com/flashsale/seckill/internal/lock/zklock"
)

// ZooKeeper is a Java server: the tests run Debian's package (apt-get install -y zookeeper,
// which .ci/run does) through zkserver — one standalone server per test process, started the
// first time a test asks for it — or use the ensemble SECKILL_TEST_ZK_SERVERS names.
var (
	zkOnce   sync.Once
	zkShared *zkserver.Server
	zkDir    string
	zkErr    error
)

// needZooKeeper fails the test when ZooKeeper cannot be run and real backends are required, and
// skips it, saying why, otherwise.
func needZooKeeper(t testing.TB) {
	t.Helper()
	if err := zkserver.Available(); err != nil {
		if Required() {
			t.Fatalf("ZooKeeper is required (SECKILL_TEST_REQUIRE_BACKENDS=1): %v", err)
		}
		t.Skipf("this test needs a ZooKeeper server: %v", err)
	}
}

// ZooKeeperServers returns the servers of the test process's ZooKeeper, started on first use and
// shared by the process's tests, which stay apart by their SKUs (lock directories are prefix +
// SKU). SECKILL_TEST_ZK_SERVERS (host:port, comma-separated) names an ensemble to use instead.
func ZooKeeperServers(t testing.TB) []string {
	t.Helper()
	if env := os.Getenv("SECKILL_TEST_ZK_SERVERS"); env != "" {
		return strings.Split(env, ",")
	}
	needZooKeeper(t)
	zkOnce.Do(func() {
		if zkDir, zkErr = os.MkdirTemp("", "seckill-test-zk-"); zkErr != nil {
			return
		}
		var servers []*zkserver.Server
		if servers, zkErr = zkserver.New(zkDir, 1); zkErr == nil {
			zkShared, zkErr = servers[0], servers[0].Start()
		}
	})
	require.NoError(t, zkErr, "the test process's ZooKeeper")
	return []string{zkShared.Addr}
}

// stopZooKeeper stops the process's ZooKeeper, if one was started.
func stopZooKeeper() {
	if zkShared != nil {
		zkShared.Kill()
	}
	if zkDir != "" {
		_ = os.RemoveAll(zkDir)
	}
}

// ZooKeeperFor returns the test process's ZooKeeper for the zookeeper strategy, which needs one,
// and nil for the others, which run as cmd/api does when none is configured.
func ZooKeeperFor(t testing.TB, strategy string) []string {
	t.Helper()
	if strategy != "zookeeper" {
		return nil
	}
	return ZooKeeperServers(t)
}

// ZooKeeperEnv returns the environment that points a service process at the test process's
// ZooKeeper (SECKILL_ZK_SERVERS), so that it offers the zookeeper strategy — or, where ZooKeeper
// cannot run and real backends are not required, nothing, saying so in the log: the processes
// then run without the strategy, and its subtests skip (ZooKeeperFor).
func ZooKeeperEnv(t testing.TB) []string {
	t.Helper()
	if err := zkserver.Available(); err != nil && !Required() && os.Getenv("SECKILL_TEST_ZK_SERVERS") == "" {
		t.Logf("the processes run without the zookeeper strategy: %v", err)
		return nil
	}
	return []string{"SECKILL_ZK_SERVERS=" + strings.Join(ZooKeeperServers(t), ",")}
}

// ZooKeeper returns a new connection (its own session) to servers, as an instance makes it, with
// the given session timeout; closed in t.Cleanup.
func ZooKeeper(t testing.TB, servers []string, sessionTimeout time.Duration) *zk.Conn {
	t.Helper()
	c, err := zklock.Dial(servers, sessionTimeout, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.Equal(t, zk.StateHasSession, c.State(), "no ZooKeeper session within %s", sessionTimeout)
	return c
}

// StartZooKeeper starts a standalone ZooKeeper server of the test's own, stopped in t.Cleanup.
func StartZooKeeper(t testing.TB) *zkserver.Server {
	t.Helper()
	return StartZooKeeperEnsemble(t, 1)[0]
}

// StartZooKeeperEnsemble starts an ensemble of n servers of the test's own (n = 1: standalone),
// waits until each serves, and stops them in t.Cleanup.
func StartZooKeeperEnsemble(t testing.TB, n int) []*zkserver.Server {
	t.Helper()
	needZooKeeper(t)
	servers, err := zkserver.New(t.TempDir(), n)
	require.NoError(t, err)
	t.Cleanup(func() { zkserver.Kill(servers...) })
	require.NoError(t, zkserver.StartAll(servers))
	return servers
}
