package lockstrategy_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/devserver/etcdserver"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

func etcdReq(sku, user string) stock.OrderRequest {
	return stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "etcd"}
}

// etcdMemberStopped stops one member of a 3-member etcd cluster mid-sale: the other two keep a
// quorum, locks keep being granted, nothing is oversold.
var etcdMemberStopped = memberLoss{name: "member-stopped", what: "one of three members stopped",
	start: func(t *testing.T, _ string) (backendtest.Wiring, func()) {
		members := backendtest.StartEtcdCluster(t, 3)
		return backendtest.Wiring{EtcdEndpoints: etcdserver.Endpoints(members...)}, members[2].Close
	}}

// TestEtcdReplacedCluster moves a product that was sold under one etcd cluster to a new cluster,
// whose revisions start again near 1: every token is now smaller than the fence in the database.
// The strategy notices that the fence is ahead of the cluster itself, resets it, and sells —
// instead of fencing out every write forever.
func TestEtcdReplacedCluster(t *testing.T) {
	ctx := context.Background()
	s, sku := onSale(t, 3)

	old := etcdserver.Endpoints(backendtest.StartEtcdCluster(t, 1)...)
	oldClient := backendtest.EtcdClient(t, old)
	for i := range 50 { // the old cluster has lived a while: its revisions are well ahead
		_, err := oldClient.Put(ctx, fmt.Sprintf("/filler/%d", i), "x")
		require.NoError(t, err)
	}
	before := backendtest.NewInstance(t, config("etcd"), backendtest.Wiring{Store: s, EtcdEndpoints: old})
	first, err := place(before, etcdReq(sku, "u1"))
	require.NoError(t, err)
	p, err := s.Product(ctx, sku)
	require.NoError(t, err)
	require.Greater(t, p.Fence, int64(50))

	fresh := etcdserver.Endpoints(backendtest.StartEtcdCluster(t, 1)...)
	after := backendtest.NewInstance(t, config("etcd"), backendtest.Wiring{Store: s, EtcdEndpoints: fresh})
	second, err := place(after, etcdReq(sku, "u2"))
	require.NoError(t, err, "the stale fence was recognised and reset")
	assert.Zero(t, backendtest.Counter(t, "seckill_fenced_out_total", nil, after))
	p, _ = s.Product(ctx, sku)
	assert.Less(t, p.Fence, int64(50), "the fence now follows the new cluster")
	backendtest.RequireInvariant(t, s, sku, []stock.Order{first, second})
}
