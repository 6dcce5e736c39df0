package service

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/stock"
)

// TestCatalogSharesColdReads: orders that find a product's window missing at the same moment —
// the first burst on a cold instance — share one read of the product, instead of taking one
// pooled connection each (the lab's pool experiment ran its pool dry on them). The read here
// stands in for Store.Product and is held open until every order is waiting on it. Without the
// single flight each of the 50 reads its own.
func TestCatalogSharesColdReads(t *testing.T) {
	var reads atomic.Int32
	release := make(chan struct{})
	opens := time.Now().Add(time.Hour)
	c := newCatalog(func(ctx context.Context, sku string) (stock.Product, error) {
		reads.Add(1)
		<-release
		return stock.Product{SKU: sku, Window: stock.Window{Starts: opens}}, nil
	}, time.Second)

	const orders = 50
	var (
		wg      sync.WaitGroup
		waiting sync.WaitGroup
		early   atomic.Int32
	)
	waiting.Add(orders)
	for range orders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waiting.Done()
			if c.check(context.Background(), "cold", time.Now()) != nil {
				early.Add(1)
			}
		}()
	}
	waiting.Wait()
	time.Sleep(50 * time.Millisecond) // every order is inside check, at the read
	close(release)
	wg.Wait()
	require.EqualValues(t, orders, early.Load(), "every order was told the sale has not started")
	assert.EqualValues(t, 1, reads.Load(), "the orders shared one read")
}
