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
// give-back, as in TestHybridLostGiveBack. While its instance's heartbeat is fresh its unit is
// held back but not stranded — exactly like an order in flight, which is why the alert does not
// watch held-back units — then, once the heartbeat has lapsed, stranded until a sweeper returns
// it; then neither, and the unit sells. The instance that reports it is another one on the same
// backends, as a replica scraped beside the one that failed would be; its own TTL is long, so
// that it sweeps only every few seconds and the stranded unit is there to be seen.
func TestStrandedUnits(t *testing.T) {
	ctx := context.Background()
	cfg := service.Defaults()
	cfg.LockTTL = 900 * time.Millisecond // the watchdog notices the cut within a third of it
	cfg.LockWait = time.Second
	cut, rp := backendtest.CutFromRedisInSection(t, cfg, "victim")
	slow := cfg
	slow.InstanceTTL = time.Minute // sweeps every 7.5 s
	watcher := backendtest.NewInstance(t, slow, backendtest.Wiring{})

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
	held, stranded = heldUnits(t, watcher, sku)
	assert.EqualValues(t, 1, held, "the database has the unit, admission holds it back")
	assert.Zero(t, stranded, "its instance's heartbeat is fresh: the reservation may still become an order, not stranded")

	require.Eventually(t, func() bool {
		_, stranded := heldUnits(t, watcher, sku)
		return stranded == 1
	}, cfg.InstanceTTL+time.Second, 10*time.Millisecond, "a reservation whose instance stopped beating is never reported stranded")
	t.Logf("reported stranded %s after the order was abandoned (its instance's TTL %s)", time.Since(abandoned).Round(10*time.Millisecond),
		cfg.InstanceTTL)
	require.NoError(t, rp.Start())
	require.Eventually(t, func() bool {
		held, stranded := heldUnits(t, watcher, sku)
		return held == 0 && stranded == 0
	}, 3*time.Second, 10*time.Millisecond, "no sweeper returned the stranded unit")
	t.Logf("back on sale %s after the order was abandoned", time.Since(abandoned).Round(10*time.Millisecond))

	require.NoError(t, buy(watcher, "late"), "the returned unit sells")
	require.NoError(t, buy(watcher, "later"), "and so does the last")
	assert.ErrorIs(t, buy(watcher, "too-late"), stock.ErrSoldOut)
	backendtest.RequireInvariant(t, watcher.Store, sku, acked)
}
