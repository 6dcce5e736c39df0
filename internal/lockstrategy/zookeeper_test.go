package lockstrategy_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/devserver/zkserver"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

func zkReq(sku, user string) stock.OrderRequest {
	return stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "zookeeper"}
}

// zkSession is a session on the test process's ZooKeeper with the service's session timeout.
func zkSession(t *testing.T) *zk.Conn {
	t.Helper()
	return backendtest.ZooKeeper(t, backendtest.ZooKeeperServers(t), config("zookeeper").LockTTL)
}

// zkLeaderKilled kills the leader of a 3-member ensemble mid-sale — the member that says so at
// that moment, every member asked — the two left elect a new one and keep a quorum, the sessions
// move to them, locks keep being granted, nothing is oversold.
var zkLeaderKilled = memberLoss{name: "leader-killed", what: "the leader of three killed",
	start: func(t *testing.T, _ string) (backendtest.Wiring, func()) {
		members := backendtest.StartZooKeeperEnsemble(t, 3)
		return backendtest.Wiring{ZKServers: zkserver.Addrs(members...)}, func() {
			leader, ok := zkLeader(t, members)
			if !ok {
				return
			}
			leader.Kill()
			t.Logf("killed %s, the leader", leader.Addr)
			left := slices.DeleteFunc(slices.Clone(members), func(m *zkserver.Server) bool { return m == leader })
			assert.Eventually(t, func() bool {
				for _, m := range left {
					if mode, err := m.Mode(); err == nil && mode == "leader" {
						return true
					}
				}
				return false
			}, 30*time.Second, 50*time.Millisecond, "the two members left elected no leader")
		}
	}}

// zkLeader asks every member of an ensemble its mode and returns the one leader; it fails the
// test (without stopping it: it runs in a fault's goroutine) unless every member answers, as
// leader or follower, and exactly one leads.
func zkLeader(t *testing.T, members []*zkserver.Server) (*zkserver.Server, bool) {
	var leaders []*zkserver.Server
	for _, m := range members {
		mode, err := m.Mode()
		if !assert.NoError(t, err, "mode of %s", m.Addr) || !assert.Contains(t, []string{"leader", "follower"}, mode, "mode of %s", m.Addr) {
			return nil, false
		}
		if mode == "leader" {
			leaders = append(leaders, m)
		}
	}
	if !assert.Len(t, leaders, 1, "one leader") {
		return nil, false
	}
	return leaders[0], true
}

// TestFencesOfTwoLockServices sells one product under etcd, then ZooKeeper, then etcd again, as
// an operator moving between lock services would: each service's tokens are checked against its
// own fence, so a zxid is never compared with a revision and no change of service stalls the sale.
func TestFencesOfTwoLockServices(t *testing.T) {
	ctx := context.Background()
	s, sku := onSale(t, 6)
	inst := backendtest.NewInstance(t, config("etcd"), backendtest.Wiring{Store: s, ZKServers: backendtest.ZooKeeperServers(t)})
	var acked []stock.Order
	for i, strategy := range []string{"etcd", "zookeeper", "etcd", "zookeeper", "etcd"} {
		o, err := place(inst, stock.OrderRequest{SKU: sku, UserID: fmt.Sprintf("u%d", i), Quantity: 1, Strategy: strategy})
		require.NoError(t, err, "order %d, under %s", i, strategy)
		acked = append(acked, o)
	}
	p, err := s.Product(ctx, sku)
	require.NoError(t, err)
	assert.Positive(t, p.Fence, "the etcd fence")
	assert.Positive(t, p.ZKFence, "the ZooKeeper fence")
	assert.Zero(t, backendtest.Counter(t, "seckill_fenced_out_total", nil, inst))
	backendtest.RequireInvariant(t, s, sku, acked)
}

// TestZooKeeperReplacedEnsemble moves a product sold under one ensemble to a new one, whose
// zxids start again near 0: every token is now below the fence in the database. The strategy
// sees that the fence is ahead of the ensemble itself, resets it, and sells — instead of fencing
// out every write forever.
func TestZooKeeperReplacedEnsemble(t *testing.T) {
	ctx := context.Background()
	s, sku := onSale(t, 3)
	cfg := config("zookeeper")

	old := zkserver.Addrs(backendtest.StartZooKeeper(t))
	filler := backendtest.ZooKeeper(t, old, cfg.LockTTL)
	for i := range 50 { // the old ensemble has lived a while: its zxids are well ahead
		_, err := filler.Create(fmt.Sprintf("/filler-%d", i), nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	before := backendtest.NewInstance(t, cfg, backendtest.Wiring{Store: s, ZKServers: old})
	first, err := place(before, zkReq(sku, "u1"))
	require.NoError(t, err)
	p, err := s.Product(ctx, sku)
	require.NoError(t, err)
	require.Greater(t, p.ZKFence&0xffffffff, int64(50), "the zxid's counter, past the filler")

	after := backendtest.NewInstance(t, cfg, backendtest.Wiring{Store: s, ZKServers: zkserver.Addrs(backendtest.StartZooKeeper(t))})
	second, err := place(after, zkReq(sku, "u2"))
	require.NoError(t, err, "the stale fence was recognised and reset")
	assert.Zero(t, backendtest.Counter(t, "seckill_fenced_out_total", nil, after))
	now, _ := s.Product(ctx, sku)
	assert.Less(t, now.ZKFence, p.ZKFence, "the fence now follows the new ensemble")
	backendtest.RequireInvariant(t, s, sku, []stock.Order{first, second})
}
