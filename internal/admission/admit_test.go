package admission_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/stock"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

// TestBatchedAdmissionAnswersAsAlone releases 300 requests together on one ledger: 150 buyers
// asking twice each (half of them with one Idempotency-Key for both) for 50 units — orders of
// one product, or checkouts of a unit of each of two. Asked in batches or one call per request,
// the answers are the same: 50 buyers admitted once each, the second request of each answered in
// flight (same key) or already purchased, and every other request busy — the units are held by
// reservations that could still come back. Each counter ends at zero with 50 reservations. A
// batch that read the counter once and not again per request admits all 64 of its first call;
// one that forgot its own requests admits a buyer twice; and the batched case must have seen
// calls of more than one request, or it did not batch.
func TestBatchedAdmissionAnswersAsAlone(t *testing.T) {
	for _, tc := range []struct {
		name     string
		products []string
		batch    int
	}{
		{"orders, batch 1", []string{""}, 1},
		{"orders, batch 64", []string{""}, 64},
		{"checkouts, batch 1", []string{"-a", "-b"}, 1},
		{"checkouts, batch 64", []string{"-a", "-b"}, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const units, buyers = 50, 150
			base := backendtest.SKU(t)
			store := backendtest.Store(t)
			ctx := context.Background()
			for _, p := range tc.products {
				_, err := store.PutProduct(ctx, stock.ProductSpec{SKU: base + p, Name: base, Stock: units, MaxPerOrder: 1})
				require.NoError(t, err)
			}
			reg := prometheus.NewRegistry()
			client := backendtest.Redis(t)
			backendtest.OpenConns(t, client, 64) // a call per buyer: up to the pool's 64 at once
			ledger := admission.New(client, store, "batch-test", 2*time.Second, slog.New(slog.DiscardHandler), reg,
				admission.Options{Batch: tc.batch})
			ledger.Beat(ctx)

			type answer struct {
				user string
				err  error
			}
			answers := make(chan answer, 2*buyers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range buyers {
				user := fmt.Sprintf("u%03d", i)
				key := ""
				if i%2 == 0 {
					key = "k-" + user
				}
				for range 2 {
					wg.Go(func() {
						<-start
						var lines []stock.OrderRequest
						for _, p := range tc.products {
							lines = append(lines, stock.OrderRequest{SKU: base + p, UserID: user, Quantity: 1, IdempotencyKey: key})
						}
						_, err := ledger.Admit(ctx, lines, 0)
						answers <- answer{user, err}
					})
				}
			}
			close(start)
			wg.Wait()
			close(answers)

			admitted, second := map[string]int{}, map[string]error{}
			busy := 0
			for a := range answers {
				switch {
				case a.err == nil:
					admitted[a.user]++
				case errors.Is(a.err, stock.ErrBusy):
					busy++
				case errors.Is(a.err, stock.ErrDuplicateRequest), errors.Is(a.err, stock.ErrAlreadyPurchased):
					second[a.user] = a.err
				default:
					t.Errorf("%s: unexpected answer %v", a.user, a.err)
				}
			}
			require.Len(t, admitted, units, "buyers admitted")
			for user, n := range admitted {
				assert.Equal(t, 1, n, "%s admitted twice", user)
				var i int
				_, _ = fmt.Sscanf(user, "u%03d", &i)
				want := stock.ErrAlreadyPurchased
				if i%2 == 0 {
					want = stock.ErrDuplicateRequest
				}
				assert.ErrorIs(t, second[user], want, "%s's second request", user)
			}
			assert.Len(t, second, units, "only admitted buyers hear already purchased or in flight")
			assert.Equal(t, 2*(buyers-units), busy, "every request of the others is busy: the units are held")

			for _, p := range tc.products {
				st, err := ledger.State(ctx, base+p, nil)
				require.NoError(t, err)
				require.NotNil(t, st.Stock)
				assert.Zero(t, *st.Stock, "the counter of %s", base+p)
				assert.EqualValues(t, units, st.Reservations, "reservations of %s", base+p)
			}

			calls, asked := callBuyers(t, reg)
			assert.Equal(t, 2*buyers, asked, "requests answered")
			if tc.batch > 1 {
				assert.Less(t, calls, asked, "no call took more than one request")
			} else {
				assert.Equal(t, calls, asked, "a call of one per request")
			}
		})
	}
}

// callBuyers returns the admission calls that answered and the buyers they answered
// (seckill_admission_call_buyers).
func callBuyers(t *testing.T, reg *prometheus.Registry) (calls, buyers int) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "seckill_admission_call_buyers" {
			h := f.GetMetric()[0].GetHistogram()
			return int(h.GetSampleCount()), int(h.GetSampleSum())
		}
	}
	t.Fatal("seckill_admission_call_buyers not registered")
	return 0, 0
}

// TestAdmitCheckout: a checkout is admitted whole or not at all, both ways admission takes it —
// one script on one Redis, line by line on a Redis Cluster. Admitted, each line holds a
// reservation; a line short of stock refuses the checkout naming its product and leaves the
// other product as it was (its counter, its buyers: the buyer may buy it alone); a buyer who
// holds a line's product is refused for that line.
func TestAdmitCheckout(t *testing.T) {
	ctx := context.Background()
	store := backendtest.Store(t)
	modes := map[string]func(t *testing.T) redis.UniversalClient{
		"one script": func(t *testing.T) redis.UniversalClient { return backendtest.Redis(t) },
		"line by line (Redis Cluster)": func(t *testing.T) redis.UniversalClient {
			c := backendtest.StartRedisCluster(t)
			clients, err := redisclient.New(redisclient.Cluster, c.Addrs(), "")
			require.NoError(t, err)
			t.Cleanup(func() { _ = clients[0].Close() })
			return clients[0]
		},
	}
	for name, client := range modes {
		t.Run(name, func(t *testing.T) {
			r := client(t)
			base := backendtest.SKU(t)
			a, b := base+"-a", base+"-b"
			for sku, units := range map[string]int64{a: 1, b: 5, base + "-c": 5} {
				_, err := store.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: units, MaxPerOrder: 1})
				require.NoError(t, err)
			}
			l := admission.New(r, store, "checkouts", time.Minute, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
				admission.Options{WaitHeld: time.Millisecond})
			l.Beat(ctx)
			lines := func(user string) []stock.OrderRequest {
				return []stock.OrderRequest{{SKU: a, UserID: user, Quantity: 1}, {SKU: b, UserID: user, Quantity: 1}}
			}
			state := func(sku string) admission.State {
				live, err := l.Live(ctx)
				require.NoError(t, err)
				st, err := l.State(ctx, sku, live)
				require.NoError(t, err)
				require.NotNil(t, st.Stock)
				return st
			}

			first := lines("u1")
			res, err := l.Admit(ctx, first, 0)
			require.NoError(t, err)
			require.Len(t, res, 2)
			assert.EqualValues(t, 0, *state(a).Stock)
			assert.EqualValues(t, 4, *state(b).Stock)
			for i := range first {
				first[i].Reservation = res[i]
			}
			l.Settle(ctx, first) // written: the units stay sold
			for _, line := range first {
				l.Done(line.Reservation)
			}

			_, err = l.Admit(ctx, lines("u2"), 0)
			var refused *stock.CheckoutError
			require.ErrorAs(t, err, &refused)
			require.ErrorIs(t, err, stock.ErrSoldOut)
			assert.Equal(t, []string{a}, refused.SKUs)
			after := state(b)
			assert.EqualValues(t, 4, *after.Stock, "the refused checkout holds nothing of the other product")
			assert.Zero(t, after.Reservations)
			_, err = l.Admit(ctx, []stock.OrderRequest{{SKU: b, UserID: "u2", Quantity: 1}}, 0)
			require.NoError(t, err, "nor its buyer: u2 may buy it alone")

			_, err = l.Admit(ctx, []stock.OrderRequest{{SKU: b, UserID: "u1", Quantity: 1}, {SKU: base + "-c", UserID: "u1", Quantity: 1}}, 0)
			require.ErrorAs(t, err, &refused)
			require.ErrorIs(t, err, stock.ErrAlreadyPurchased)
			assert.Equal(t, []string{b}, refused.SKUs)

			_, err = l.Admit(ctx, []stock.OrderRequest{{SKU: b, UserID: "u3", Quantity: 1}, {SKU: base + "-unknown", UserID: "u3", Quantity: 1}}, 0)
			require.ErrorAs(t, err, &refused)
			require.ErrorIs(t, err, stock.ErrNotFound)
			assert.Equal(t, []string{base + "-unknown"}, refused.SKUs)
			assert.EqualValues(t, 3, *state(b).Stock, "u2's unit alone: the unknown product's checkout took nothing")
		})
	}
}

// TestCheckoutSoldOutBeforeBusy: a checkout one of whose lines is sold out is refused sold out
// even when another line — first in SKU order — finds its last unit held by an order in its
// section. Busy would send the buyer back for an answer already known: whatever becomes of
// the held unit, the sold-out line refuses the checkout.
func TestCheckoutSoldOutBeforeBusy(t *testing.T) {
	ctx := context.Background()
	store := backendtest.Store(t)
	base := backendtest.SKU(t)
	a, b := base+"-a", base+"-b"
	for _, sku := range []string{a, b} {
		_, err := store.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
		require.NoError(t, err)
	}
	l := admission.New(backendtest.Redis(t), store, "checkouts", time.Minute, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
		admission.Options{WaitHeld: time.Second})
	l.Beat(ctx)
	_, err := l.Admit(ctx, []stock.OrderRequest{{SKU: a, UserID: "in-section", Quantity: 1}}, 0) // held, not yet written
	require.NoError(t, err)
	sold := stock.OrderRequest{SKU: b, UserID: "sold", Quantity: 1}
	res, err := l.Admit(ctx, []stock.OrderRequest{sold}, 0)
	require.NoError(t, err)
	sold.Reservation = res[0]
	l.Settle(ctx, []stock.OrderRequest{sold})
	l.Done(sold.Reservation)

	_, err = l.Admit(ctx, []stock.OrderRequest{{SKU: a, UserID: "u", Quantity: 1}, {SKU: b, UserID: "u", Quantity: 1}}, 0)
	var refused *stock.CheckoutError
	require.ErrorAs(t, err, &refused)
	require.ErrorIs(t, err, stock.ErrSoldOut, "not busy: the sold-out line refuses the checkout whatever the held unit becomes")
	assert.Equal(t, []string{b}, refused.SKUs)
}

// countScripts counts the scripts a client runs (EVALSHA).
type countScripts struct{ n atomic.Int64 }

func (c *countScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *countScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "evalsha") {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *countScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestBatchedHandOver hands 60 admitted reservations over to the order queue at once, as 60
// queued orders' 202s do: every one moves to the queue's hash, none is left in the reserved one,
// and with a batch of 64 they went in fewer calls than hand-overs — one per hand-over without it.
// A batch that dropped a member would leave its reservation reserved, for a sweeper to return
// under an order that is queued.
func TestBatchedHandOver(t *testing.T) {
	for _, batch := range []int{1, 64} {
		t.Run(fmt.Sprintf("batch %d", batch), func(t *testing.T) {
			const n = 60
			sku := backendtest.SKU(t)
			store := backendtest.Store(t)
			ctx := context.Background()
			_, err := store.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: sku, Stock: n, MaxPerOrder: 1})
			require.NoError(t, err)
			client := backendtest.Redis(t)
			ledger := admission.New(client, store, "handover-test", 2*time.Second, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
				admission.Options{Batch: batch})
			ledger.Beat(ctx)
			reqs := make([]stock.OrderRequest, n)
			for i := range reqs {
				reqs[i] = stock.OrderRequest{SKU: sku, UserID: fmt.Sprintf("u%02d", i), Quantity: 1}
				res, err := ledger.Admit(ctx, reqs[i:i+1], 0)
				require.NoError(t, err)
				reqs[i].Reservation = res[0]
			}
			counted := &countScripts{}
			client.AddHook(counted)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for _, r := range reqs {
				wg.Go(func() {
					<-start
					assert.NoError(t, ledger.HandOver(ctx, sku, []stock.OrderRequest{r}))
				})
			}
			close(start)
			wg.Wait()
			k := admission.KeysOf(sku)
			queued, err := client.HLen(ctx, k.Queued).Result()
			require.NoError(t, err)
			reserved, err := client.HLen(ctx, k.Reserved).Result()
			require.NoError(t, err)
			assert.EqualValues(t, n, queued, "reservations handed over")
			assert.Zero(t, reserved, "reservations left with their instance")
			calls := counted.n.Load()
			t.Logf("%d hand-overs in %d calls", n, calls)
			if batch > 1 {
				assert.Less(t, calls, int64(n), "no call carried more than one hand-over")
			} else {
				assert.EqualValues(t, n, calls, "a call per hand-over")
			}
		})
	}
}
