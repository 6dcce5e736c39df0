package stock_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

// TestGaleraNodeRefuses: a Galera node that refuses to serve (here told to, as an operator
// drains a node: wsrep_reject_queries, the very answer of a node outside its primary component
// or still joining it, 1047) makes the store say unavailable — for a product that exists, never
// not found, never internal — and not ready; once it serves again, so does the store.
func TestGaleraNodeRefuses(t *testing.T) {
	g := backendtest.GaleraCluster(t)
	ctx := context.Background()
	sku := backendtest.SKU(t)
	_, err := g.Store(t, 0).PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 5, MaxPerOrder: 1})
	require.NoError(t, err)
	s := g.Store(t, 2)
	require.NoError(t, s.Ready(ctx))
	read, err := s.Product(ctx, sku)
	require.NoError(t, err)
	require.NoError(t, g.Nodes[2].Exec(ctx, "SET GLOBAL wsrep_reject_queries = ALL"))
	t.Cleanup(func() { _ = g.Nodes[2].Exec(ctx, "SET GLOBAL wsrep_reject_queries = NONE") })

	_, err = s.Product(ctx, sku)
	var refused *mysql.MySQLError
	require.ErrorAs(t, err, &refused)
	assert.EqualValues(t, 1047, refused.Number, "the node's own answer")
	assert.Equal(t, "unavailable", stock.Code(err), "%v", err)
	_, err = s.PlaceAt(ctx, orders(stock.OrderRequest{SKU: sku, UserID: "u1", Quantity: 1}), []stock.Product{read})
	assert.Equal(t, "unavailable", stock.Code(err), "%v", err)
	err = s.Ready(ctx)
	assert.ErrorIs(t, err, stock.ErrUnavailable)
	require.NoError(t, s.Ping(ctx), "a refusing node still answers a ping: readiness must read a table")

	require.NoError(t, g.Nodes[2].Exec(ctx, "SET GLOBAL wsrep_reject_queries = NONE"))
	assert.NoError(t, s.Ready(ctx))
	p, err := s.Product(ctx, sku)
	require.NoError(t, err)
	assert.EqualValues(t, 5, p.Stock)
}

// TestGaleraReadsAreCausal: a COMMIT on one node returns once the cluster has certified it, not
// once every node has applied it. Here node 1 applies nothing for a moment (FLUSH TABLES WITH
// READ LOCK pauses its applier) while a product is created on node 0: a plain read on node 1
// misses it — the 404 for a product that exists — and the store's read waits until node 1 has
// applied it, and finds it.
func TestGaleraReadsAreCausal(t *testing.T) {
	g := backendtest.GaleraCluster(t)
	ctx := context.Background()
	writer, reader := g.Store(t, 0), g.Store(t, 1)
	db, err := sql.Open("mysql", g.DSN(1)+"&wsrep_sync_wait=0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	paused, err := db.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = paused.Close() })
	_, err = paused.ExecContext(ctx, "FLUSH TABLES WITH READ LOCK")
	require.NoError(t, err)
	unpaused := false
	unpause := func() {
		if !unpaused {
			unpaused = true
			_, err := paused.ExecContext(ctx, "UNLOCK TABLES")
			require.NoError(t, err)
		}
	}
	t.Cleanup(unpause)

	sku := backendtest.SKU(t)
	_, err = writer.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
	require.NoError(t, err)
	var n int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM products WHERE sku = ?", sku).Scan(&n))
	assert.Zero(t, n, "node 1 had applied the product already: the read that does not wait was not put to the test")
	read := make(chan error, 1)
	go func() {
		_, err := reader.Product(ctx, sku)
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("the store answered before node 1 applied the product: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	unpause()
	select {
	case err := <-read:
		assert.NoError(t, err, "the store read a product committed on another node as missing")
	case <-time.After(10 * time.Second):
		t.Fatal("the store's read did not end once node 1 applied the product")
	}
}
