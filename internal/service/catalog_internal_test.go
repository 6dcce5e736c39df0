package service

import (
	"context"
	"runtime"
	"strings"
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
// single flight each of the 50 reads its own. The read is let go once every order is parked in
// check: the one reading, and the others waiting for it (or each at a read of its own).
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
			if _, err := c.check(context.Background(), "cold", time.Now()); err != nil {
				early.Add(1)
			}
		}()
	}
	waiting.Wait()
	require.Eventually(t, func() bool { return parked("service.(*catalog).check(") == orders }, 10*time.Second, time.Millisecond,
		"the orders never all waited at the read")
	close(release)
	wg.Wait()
	require.EqualValues(t, orders, early.Load(), "every order was told the sale has not started")
	assert.EqualValues(t, 1, reads.Load(), "the orders shared one read")
}

// parked counts the goroutines blocked (not running) with fn in their stack: those waiting
// there, as the runtime's own dump of every goroutine says.
func parked(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(g, fn) && !strings.Contains(header, "[running]") && !strings.Contains(header, "[runnable]") {
			count++
		}
	}
	return count
}
