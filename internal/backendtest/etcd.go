package backendtest

import (
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flashsale/seckill/devserver/etcdserver"
	"github.com/flashsale/seckill/internal/lock/etcdlock"
)

var (
	etcdOnce   sync.Once
	etcdMember *etcdserver.Member
	etcdDir    string
	etcdErr    error
)

// startEtcd starts the process's etcd: a real etcd server, in-process, on free loopback ports.
func startEtcd() {
	etcdDir, etcdErr = os.MkdirTemp("", "seckill-test-etcd-")
	if etcdErr == nil {
		etcdMember, etcdErr = etcdserver.Start(etcdDir)
	}
}

// stopEtcd stops the process's etcd, if one was started.
func stopEtcd() {
	if etcdMember != nil {
		etcdMember.Close()
	}
	if etcdDir != "" {
		_ = os.RemoveAll(etcdDir)
	}
}

// EtcdEndpoints returns the client URLs of the test process's etcd. Tests share it and stay
// apart by their SKUs (lock keys are prefix + SKU).
func EtcdEndpoints(t testing.TB) []string {
	t.Helper()
	etcdOnce.Do(startEtcd)
	require.NoError(t, etcdErr, "embedded etcd")
	return []string{etcdMember.ClientURL}
}

// Etcd returns a new client (its own connection and, in a strategy, its own session) on the test
// process's etcd, closed in t.Cleanup.
func Etcd(t testing.TB) *clientv3.Client {
	t.Helper()
	return EtcdClient(t, EtcdEndpoints(t))
}

// EtcdClient returns a new client on endpoints, closed in t.Cleanup.
func EtcdClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := etcdlock.NewClient(endpoints)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// StartEtcdCluster starts an etcd cluster of n members of the test's own, stopped in t.Cleanup.
func StartEtcdCluster(t testing.TB, n int) []*etcdserver.Member {
	t.Helper()
	members, err := etcdserver.StartCluster(t.TempDir(), n)
	require.NoError(t, err)
	t.Cleanup(func() { etcdserver.Close(members...) })
	return members
}
