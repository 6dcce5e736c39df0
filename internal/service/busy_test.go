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
// sections for a few milliseconds; answering busy then, at once, fails here. How often a buyer
// meets that moment depends on timing, so the test then makes it happen: the last unit of a
// product held by an order whose section is held open, another buyer must wait the budget.
func TestNoNeedlessBusy(t *testing.T) {
	cfg := service.Defaults()
	inst := backendtest.NewInstance(t, cfg, backendtest.Wiring{})
	ctx := context.Background()
	sku := backendtest.SKU(t)
	const units, clients = 3000, 64
	// A wait for held units ends before a backoff step would overrun the budget: a busy answer
	// that waited its budget comes this much before it, at most.
	budget := cfg.LockWait - 100*time.Millisecond
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
				if stock.Code(err) == "busy" && took < budget {
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

	hooks, inside, release := backendtest.HoldSection("holder")
	defer release()
	held := cfg
	held.Hooks = hooks
	inst = backendtest.NewInstance(t, held, backendtest.Wiring{})
	last := backendtest.SKU(t)
	_, err = inst.PutProduct(ctx, stock.ProductSpec{SKU: last, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
	require.NoError(t, err)
	placed := make(chan error, 1)
	go func() {
		_, _, err := inst.PlaceOrder(deadline, stock.OrderRequest{SKU: last, UserID: "holder", Quantity: 1, Strategy: "hybrid"})
		placed <- err
	}()
	select {
	case <-inside:
	case <-deadline.Done():
		t.Fatal("the holder's section never started")
	}
	sent := time.Now()
	_, _, err = inst.PlaceOrder(deadline, stock.OrderRequest{SKU: last, UserID: "other", Quantity: 1, Strategy: "hybrid"})
	took := time.Since(sent)
	require.Equal(t, "busy", stock.Code(err), "the last unit held: %v", err)
	assert.GreaterOrEqual(t, took, budget, "busy answers came before their wait budget ran out: the last unit held, %s", err)
	release()
	require.NoError(t, <-placed, "the holder's order")
	_, _, err = inst.PlaceOrder(deadline, stock.OrderRequest{SKU: last, UserID: "late", Quantity: 1, Strategy: "hybrid"})
	assert.ErrorIs(t, err, stock.ErrSoldOut, "once the held unit was sold")
}
