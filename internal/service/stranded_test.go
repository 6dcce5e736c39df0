package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// heldUnits scrapes inst and returns sku's seckill_admission_held_back_units and
// seckill_admission_stranded_units; it fails the test when the scrape does not report sku.
func heldUnits(t *testing.T, inst backendtest.Instance, sku string) (held, stranded float64) {
	t.Helper()
	families, err := inst.Metrics.Gather()
	require.NoError(t, err)
	found := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "sku" && l.GetValue() == sku {
					found[f.GetName()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	require.Contains(t, found, "seckill_admission_held_back_units", "sku %s is not reported", sku)
	require.Contains(t, found, "seckill_admission_stranded_units", "sku %s is not reported", sku)
	return found["seckill_admission_held_back_units"], found["seckill_admission_stranded_units"]
}

// TestStrandedUnits: an order abandoned while its instance is cut off from Redis loses its
// give-back, as in TestHybridLostGiveBack. Within its lease its unit is held back but not
// stranded — exactly like an order in flight, which is why the alert does not watch held-back
// units — then, past the lease, stranded until the sweeper returns it; then neither, and the unit
// sells. The instance that reports it is another one on the same backends, as a replica scraped
// beside the one that failed would be.
func TestStrandedUnits(t *testing.T) {
	ctx := context.Background()
	cfg := service.Defaults()
	cfg.LockTTL = 900 * time.Millisecond // the watchdog notices the cut within a third of it
	cfg.LockWait = time.Second
	cfg.ReservationLease = 4 * time.Second // longer than the lock wait and a sweep, as New requires; short, for the test's time
	watcher := backendtest.NewInstance(t, cfg, backendtest.Wiring{})

	cut, rp := backendtest.CutFromRedisInSection(t, cfg, "victim")

	sku := backendtest.SKU(t)
	_, err := watcher.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 3, MaxPerOrder: 1})
	require.NoError(t, err)
	var acked []stock.Order
	buy := func(inst backendtest.Instance, user string) error {
		o, _, err := inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "hybrid"})
		if err == nil {
			acked = append(acked, o)
		}
		return err
	}
	require.NoError(t, buy(watcher, "early"), "the watcher admits an order for the product, so it watches it")
	held, stranded := heldUnits(t, watcher, sku)
	assert.Zero(t, held, "a settled order holds nothing back")
	assert.Zero(t, stranded)

	require.ErrorIs(t, buy(cut, "victim"), stock.ErrBusy, "the section was abandoned, and its give-back could not reach Redis")
	abandoned := time.Now()
	require.NoError(t, rp.Start())
	held, stranded = heldUnits(t, watcher, sku)
	assert.EqualValues(t, 1, held, "the database has the unit, admission holds it back")
	assert.Zero(t, stranded, "within its lease the reservation may still become an order: not stranded")

	require.Eventually(t, func() bool {
		_, stranded := heldUnits(t, watcher, sku)
		return stranded == 1
	}, cfg.ReservationLease+time.Second, 10*time.Millisecond, "past its lease the reservation's unit is never reported stranded")
	require.Eventually(t, func() bool {
		held, stranded := heldUnits(t, watcher, sku)
		return held == 0 && stranded == 0
	}, 10*time.Second, 10*time.Millisecond, "the sweeper never returned the stranded unit")
	t.Logf("the unit was stranded until %s after the order was abandoned (lease %s)", time.Since(abandoned).Round(100*time.Millisecond),
		cfg.ReservationLease)

	require.NoError(t, buy(watcher, "late"), "the returned unit sells")
	require.NoError(t, buy(watcher, "later"), "and so does the last")
	assert.ErrorIs(t, buy(watcher, "too-late"), stock.ErrSoldOut)
	backendtest.RequireInvariant(t, watcher.Store, sku, acked)
}
