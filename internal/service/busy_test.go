package service_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// TestNoNeedlessBusy sells a large product to 64 clients on one instance in the default
// configuration (hybrid), every buyer asking once, to the last unit. A busy answer tells a buyer
// to come back while units may be on sale, so it is honest only once a wait budget ran out: every
// busy answer must have waited the budget (SECKILL_LOCK_WAIT) and name a cause that is one, and
// every unit must sell. At the end of the sale the last units are held by orders in their
// sections for a few milliseconds; answering busy then, at once, fails here.
func TestNoNeedlessBusy(t *testing.T) {
	cfg := service.Defaults()
	inst := backendtest.NewInstance(t, cfg, backendtest.Wiring{})
	ctx := context.Background()
	sku := backendtest.SKU(t)
	const units, clients = 3000, 64
	_, err := inst.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: units, MaxPerOrder: 1})
	require.NoError(t, err)

	deadline, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var (
		mu       sync.Mutex
		acked    []stock.Order
		early    []string // busy answers that came before their wait budget ran out
		outcomes = map[string]int{}
		wg       sync.WaitGroup
	)
	for c := range clients {
		wg.Go(func() {
			for n := 0; deadline.Err() == nil; n++ {
				user := fmt.Sprintf("c%02d-%05d", c, n)
				sent := time.Now()
				o, _, err := inst.PlaceOrder(deadline, stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "hybrid",
					IdempotencyKey: sku + "/" + user})
				took := time.Since(sent)
				mu.Lock()
				outcomes[stock.Code(err)]++
				if err == nil {
					acked = append(acked, o)
				}
				if stock.Code(err) == "busy" && took < cfg.LockWait {
					early = append(early, err.Error())
				}
				mu.Unlock()
				switch {
				case errors.Is(err, stock.ErrSoldOut):
					return
				case err != nil && stock.Code(err) != "busy":
					t.Errorf("%s: %v", user, err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d clients, %d units: %v", clients, units, outcomes)
	assert.Equal(t, units, outcomes["ok"], "every unit sold")
	assert.Empty(t, early[:min(len(early), 3)], "%d busy answers came before their wait budget ran out", len(early))
	for _, cause := range []stock.BusyCause{stock.BusyLockLost, stock.BusyFencedOut, stock.BusyConflicts, stock.BusyRowLocked,
		stock.BusyDeadlock, stock.BusyWaiting, stock.BusyQueueFull, stock.BusyNoAdmission, "other"} {
		assert.Zero(t, backendtest.Counter(t, "seckill_busy_total", map[string]string{"cause": string(cause)}, inst),
			"busy answers whose cause is not a wait budget run out: %s", cause)
	}
	backendtest.RequireInvariant(t, backendtest.Store(t), sku, acked)
}
