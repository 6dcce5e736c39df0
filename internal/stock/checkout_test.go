package stock_test

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
	"github.com/flashsale/seckill/internal/stock"
)

// onlyCheckout is the answer of a batch of one checkout.
func onlyCheckout(out []stock.Placed, err error) (stock.Checkout, error) {
	if err != nil {
		return stock.Checkout{}, err
	}
	return out[0].Checkout, out[0].Err
}

// checkoutSection places a checkout through one of the store's checkout sections, as its
// strategy would (the reads, tokens and locks it holds).
type checkoutSection func(s *stock.Store, req stock.CheckoutRequest) (stock.Checkout, error)

func checkoutSections() map[string]checkoutSection {
	return map[string]checkoutSection{
		"at": func(s *stock.Store, req stock.CheckoutRequest) (stock.Checkout, error) {
			var reads []stock.Product
			for _, l := range req.Lines {
				if p, err := s.Product(context.Background(), l.SKU); err == nil {
					reads = append(reads, p) // one it cannot read, the section names
				}
			}
			return onlyCheckout(s.PlaceAt(context.Background(), []stock.CheckoutRequest{req}, reads))
		},
		"fenced": func(s *stock.Store, req stock.CheckoutRequest) (stock.Checkout, error) {
			tokens := map[string]stock.Token{}
			for _, l := range req.Lines {
				tokens[l.SKU] = stock.Token{Fence: stock.EtcdFence, Value: 1}
			}
			return onlyCheckout(s.PlaceFenced(context.Background(), []stock.CheckoutRequest{req}, tokens, noPause))
		},
		"locked": func(s *stock.Store, req stock.CheckoutRequest) (stock.Checkout, error) {
			return onlyCheckout(locked(s, []stock.CheckoutRequest{req}, stock.NoWait))
		},
		"unguarded": func(s *stock.Store, req stock.CheckoutRequest) (stock.Checkout, error) {
			return onlyCheckout(s.PlaceUnguarded(context.Background(), []stock.CheckoutRequest{req}, noPause))
		},
	}
}

// locked places reqs under their products' row locks, as the pessimistic strategy does.
func locked(s *stock.Store, reqs []stock.CheckoutRequest, wait stock.RowWait) ([]stock.Placed, error) {
	return s.PlaceLocked(context.Background(), reqs[0].SKUs(), wait, func() []stock.CheckoutRequest { return reqs })
}

func checkout(user string, skus ...string) stock.CheckoutRequest {
	req := stock.CheckoutRequest{UserID: user, Strategy: "test"}
	for _, sku := range skus {
		req.Lines = append(req.Lines, stock.OrderRequest{SKU: sku, Quantity: 1})
	}
	return req
}

// stockOf reads a product's units left.
func stockOf(t *testing.T, s *stock.Store, sku string) int64 {
	t.Helper()
	p, err := s.Product(context.Background(), sku)
	require.NoError(t, err)
	return p.Stock
}

// TestCheckoutAllOrNothing: every section places every line of a checkout, in SKU order, in
// one status, or none — a line sold out, a product the buyer holds, an unknown product refuse
// the whole checkout, naming the lines, with nothing deducted anywhere.
func TestCheckoutAllOrNothing(t *testing.T) {
	s := backendtest.Store(t)
	for name, place := range checkoutSections() {
		t.Run(name, func(t *testing.T) {
			a, b, none := newProduct(t, s, 5, 2), newProduct(t, s, 1, 1), newProduct(t, s, 0, 1)
			c, err := place(s, checkout("u1", b, a))
			require.NoError(t, err)
			require.Len(t, c.Lines, 2)
			assert.Equal(t, []string{min(a, b), max(a, b)}, []string{c.Lines[0].SKU, c.Lines[1].SKU}, "lines in SKU order")
			for _, o := range c.Lines {
				assert.Equal(t, c.CheckoutID, o.CheckoutID)
				assert.Equal(t, c.Status, o.Status, "one status")
			}
			got, err := s.Read(context.Background(), stock.CheckoutRef(c.CheckoutID))
			require.NoError(t, err)
			assert.Equal(t, c.Lines, got.Lines)
			assert.Equal(t, []int64{4, 0}, []int64{stockOf(t, s, a), stockOf(t, s, b)})

			_, err = place(s, checkout("u2", a, b))
			var ce *stock.CheckoutError
			require.ErrorAs(t, err, &ce)
			assert.ErrorIs(t, err, stock.ErrSoldOut)
			assert.Equal(t, []string{b}, ce.SKUs)
			_, err = place(s, checkout("u3", none, a, b))
			require.ErrorAs(t, err, &ce)
			assert.ErrorIs(t, err, stock.ErrSoldOut)
			assert.ElementsMatch(t, []string{b, none}, ce.SKUs, "every line refused for the same reason")
			_, err = place(s, checkout("u1", a))
			require.ErrorAs(t, err, &ce)
			assert.ErrorIs(t, err, stock.ErrAlreadyPurchased)
			_, err = place(s, checkout("u4", a, "no-such-"+a))
			require.ErrorAs(t, err, &ce)
			assert.ErrorIs(t, err, stock.ErrNotFound)
			assert.Equal(t, []string{"no-such-" + a}, ce.SKUs)
			assert.Equal(t, []int64{4, 0}, []int64{stockOf(t, s, a), stockOf(t, s, b)}, "a refused checkout deducts nothing")
			audit, err := s.Audit(context.Background(), a)
			require.NoError(t, err)
			assert.EqualValues(t, 1, audit.Orders, "a refused checkout writes no line")
		})
	}
}

// TestCheckoutStaleLineWritesNothing: a checkout whose read of one product went stale (another
// sale moved it) writes none of its lines, not the ones before it.
func TestCheckoutStaleLineWritesNothing(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	a, b := newProduct(t, s, 5, 1), newProduct(t, s, 5, 1)
	first, last := min(a, b), max(a, b)
	pa, err := s.Product(ctx, a)
	require.NoError(t, err)
	pb, err := s.Product(ctx, b)
	require.NoError(t, err)
	_, err = placeAt(t, s, order(last, "other"))
	require.NoError(t, err)
	_, err = onlyCheckout(s.PlaceAt(ctx, []stock.CheckoutRequest{checkout("u1", a, b)}, []stock.Product{pa, pb}))
	require.ErrorIs(t, err, stock.ErrVersionConflict)
	assert.Equal(t, int64(5), stockOf(t, s, first), "a stale line wrote no line of its checkout")
	audit, err := s.Audit(ctx, first)
	require.NoError(t, err)
	assert.Zero(t, audit.Orders, "a stale line wrote no line of its checkout")
}

// TestCheckoutKey: a checkout's Idempotency-Key is one key among the orders': a second checkout
// or order under it is refused.
func TestCheckoutKey(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	a, b := newProduct(t, s, 5, 1), newProduct(t, s, 5, 1)
	req := checkout("u1", a, b)
	req.IdempotencyKey = backendtest.SKU(t) + "-key"
	c, err := onlyCheckout(locked(s, []stock.CheckoutRequest{req}, stock.NoWait))
	require.NoError(t, err)
	o, err := s.OrderByIdempotencyKey(ctx, req.IdempotencyKey)
	require.NoError(t, err)
	assert.Equal(t, c.CheckoutID, o.CheckoutID, "the key finds the checkout")
	again := checkout("u2", a, b)
	again.IdempotencyKey = req.IdempotencyKey
	_, err = onlyCheckout(locked(s, []stock.CheckoutRequest{again}, stock.NoWait))
	require.ErrorIs(t, err, stock.ErrDuplicateRequest)
	_, err = placeAt(t, s, stock.OrderRequest{SKU: a, UserID: "u3", Quantity: 1, Strategy: "test", IdempotencyKey: req.IdempotencyKey})
	require.ErrorIs(t, err, stock.ErrDuplicateRequest)
	assert.Equal(t, int64(4), stockOf(t, s, a))
}

// TestCrossedCheckouts: checkouts that list the same products in crossed orders (A+B against
// B+A, A+B+C against C+A), each taking its rows and waiting for the ones held, never deadlock:
// every section takes its rows in SKU order. Every checkout is placed whole, and each product's
// units add up. On SQLite a checkout takes the database's one write lock, and nothing crosses.
func TestCrossedCheckouts(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	const units, workers, each = 200, 12, 12
	a, b, c := newProduct(t, s, units, 1), newProduct(t, s, units, 1), newProduct(t, s, units, 1)
	orders := [][]string{{a, b}, {b, a}, {a, b, c}, {c, a}}
	var (
		mu        sync.Mutex
		deadlocks int
		placed    = map[string]int{}
		other     []error
		wg        sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				skus := orders[(w+i)%len(orders)]
				c, err := onlyCheckout(locked(s, []stock.CheckoutRequest{checkout(fmt.Sprintf("w%d-%d", w, i), skus...)}, stock.WaitForRow))
				mu.Lock()
				switch {
				case err == nil:
					placed[c.CheckoutID] = len(skus)
				case stock.CauseOfBusy(err) == stock.BusyDeadlock:
					deadlocks++
				case !errors.Is(err, stock.ErrBusy):
					other = append(other, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.Zero(t, deadlocks, "crossed checkouts deadlocked")
	assert.Empty(t, other)
	assert.NotEmpty(t, placed)
	sold := map[string]int64{}
	for id, lines := range placed {
		got, err := s.Read(ctx, stock.CheckoutRef(id))
		require.NoError(t, err)
		assert.Len(t, got.Lines, lines, "a checkout placed whole")
		for _, o := range got.Lines {
			sold[o.SKU] += int64(o.Quantity)
		}
	}
	for _, sku := range []string{a, b, c} {
		audit, err := s.Audit(ctx, sku)
		require.NoError(t, err)
		assert.True(t, audit.Consistent(), "%+v", audit)
		assert.Equal(t, sold[sku], audit.InitialStock-audit.Stock, "product %s: the units its checkouts took", sku)
	}
}

// TestCheckoutTakesRowsInSKUOrder: a checkout takes its products' rows in SKU order, whatever
// order its request lists them in. Another transaction holds the first product's row; the
// checkout, listing the products the other way round, waits for that row holding none, so the
// other can then take the second row too: no deadlock. Taken in request order, the checkout
// would hold the second row while it waits for the first, and the two would deadlock.
func TestCheckoutTakesRowsInSKUOrder(t *testing.T) {
	backendtest.NeedMySQL(t, "row locks: SQLite takes one write lock for the whole database")
	ctx := context.Background()
	s, db := backendtest.Store(t), backendtest.SQL(t)
	a, b := newProduct(t, s, 5, 1), newProduct(t, s, 5, 1)
	first, second := min(a, b), max(a, b)
	other := backendtest.HoldRow(t, first)

	placed := make(chan error, 1)
	go func() {
		_, err := onlyCheckout(locked(s, []stock.CheckoutRequest{checkout("u1", second, first)}, stock.WaitForRow))
		placed <- err
	}()
	// The checkout is waiting once its locking read runs: the other connection is idle, holding
	// the first row (the statements of both forms are FOR UPDATE reads).
	require.Eventually(t, func() bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND <> 'Sleep' AND INFO LIKE '%FOR UPDATE%'`).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 5*time.Millisecond, "the checkout never waited for the held row")
	_, crossed := other.ExecContext(ctx, "SELECT stock FROM products WHERE sku = ? FOR UPDATE", second)
	_, err := other.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	err = <-placed
	assert.NoError(t, crossed, "crossed checkouts deadlocked: the checkout held %s while it waited for %s", second, first)
	assert.NoError(t, err, "crossed checkouts deadlocked: the checkout held %s while it waited for %s", second, first)
}

// TestCheckoutLifecycle: a checkout moves as one — paid, cancelled or expired, every line in
// the same status at once, each line's units back once — and a line's own pay or cancel moves
// its whole checkout.
func TestCheckoutLifecycle(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	a, b, c := onSaleFor(t, s, 5, time.Hour), onSaleFor(t, s, 5, time.Minute), onSaleFor(t, s, 5, time.Second)
	units := func() []int64 { return []int64{stockOf(t, s, a), stockOf(t, s, b), stockOf(t, s, c)} }
	status := func(c stock.Checkout) []stock.Status {
		var out []stock.Status
		for _, o := range c.Lines {
			out = append(out, o.Status)
		}
		return out
	}

	paid, err := onlyCheckout(locked(s, []stock.CheckoutRequest{checkout("payer", a, b)}, stock.NoWait))
	require.NoError(t, err)
	assert.Equal(t, stock.Pending, paid.Status)
	assert.WithinDuration(t, paid.CreatedAt.Add(time.Minute), paid.ExpiresAt, time.Millisecond, "the shortest payment timeout of its products")
	line, err := s.Pay(ctx, stock.OrderRef(paid.Lines[0].OrderID), "payer")
	require.NoError(t, err)
	assert.Equal(t, stock.Confirmed, line.Status)
	got, err := s.Read(ctx, stock.CheckoutRef(paid.CheckoutID))
	require.NoError(t, err)
	assert.Equal(t, []stock.Status{stock.Confirmed, stock.Confirmed}, status(got), "a line's pay pays its checkout")

	cancelled, err := onlyCheckout(locked(s, []stock.CheckoutRequest{checkout("canceller", a, b)}, stock.NoWait))
	require.NoError(t, err)
	_, err = s.Cancel(ctx, stock.CheckoutRef(cancelled.CheckoutID), "someone else")
	require.ErrorIs(t, err, stock.ErrNotFound)
	got, err = s.Cancel(ctx, stock.CheckoutRef(cancelled.CheckoutID), "canceller")
	require.NoError(t, err)
	assert.Equal(t, []stock.Status{stock.Cancelled, stock.Cancelled}, status(got))
	_, err = s.Cancel(ctx, stock.OrderRef(cancelled.Lines[1].OrderID), "canceller")
	require.NoError(t, err, "cancelled again: answered as it is")
	assert.Equal(t, []int64{4, 4, 5}, units(), "the cancelled checkout's units back, once per line")

	lapsing, err := onlyCheckout(locked(s, []stock.CheckoutRequest{checkout("late", a, c)}, stock.NoWait))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := s.ExpireDue(ctx, 100)
		require.NoError(t, err)
		return stockOf(t, s, c) == 5
	}, 5*time.Second, 20*time.Millisecond, "the checkout never expired")
	got, err = s.Read(ctx, stock.CheckoutRef(lapsing.CheckoutID))
	require.NoError(t, err)
	assert.Equal(t, []stock.Status{stock.Expired, stock.Expired}, status(got), "a checkout expires as one")
	_, err = s.Pay(ctx, stock.CheckoutRef(lapsing.CheckoutID), "late")
	require.ErrorIs(t, err, stock.ErrOrderExpired, "a late payment is refused")
	assert.Equal(t, []int64{4, 4, 5}, units(), "the expired checkout's units back, once per line")
}

// TestCheckoutBatch: checkouts of the same products ride in one section as a product's orders
// do (group commit), each answered on its own, in arrival order — the stock running out part
// way, a buyer twice, a key twice — with one decrement of each product for the batch; in every
// section.
func TestCheckoutBatch(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	for name, place := range map[string]func(reqs []stock.CheckoutRequest) ([]stock.Placed, error){
		"at": func(reqs []stock.CheckoutRequest) ([]stock.Placed, error) {
			var reads []stock.Product
			for _, l := range reqs[0].Lines {
				p, err := s.Product(ctx, l.SKU)
				require.NoError(t, err)
				reads = append(reads, p)
			}
			return s.PlaceAt(ctx, reqs, reads)
		},
		"fenced": func(reqs []stock.CheckoutRequest) ([]stock.Placed, error) {
			tokens := map[string]stock.Token{}
			for _, l := range reqs[0].Lines {
				tokens[l.SKU] = stock.Token{Fence: stock.EtcdFence, Value: 1}
			}
			return s.PlaceFenced(ctx, reqs, tokens, noPause)
		},
		"locked": func(reqs []stock.CheckoutRequest) ([]stock.Placed, error) {
			return locked(s, reqs, stock.NoWait)
		},
	} {
		t.Run(name, func(t *testing.T) {
			a, b := newProduct(t, s, 2, 1), newProduct(t, s, 5, 1)
			key := backendtest.SKU(t) + "-key"
			first, again, twice, third, fourth := checkout("u1", b, a), checkout("u1", a, b), checkout("u2", a, b), checkout("u3", a, b), checkout("u4", a, b)
			first.IdempotencyKey, twice.IdempotencyKey = key, key
			placed, err := place([]stock.CheckoutRequest{first, again, twice, third, fourth})
			require.NoError(t, err)
			require.Len(t, placed, 5)
			require.NoError(t, placed[0].Err)
			assert.ErrorIs(t, placed[1].Err, stock.ErrAlreadyPurchased, "the buyer earlier in the batch holds both products")
			assert.ErrorIs(t, placed[2].Err, stock.ErrDuplicateRequest, "the key earlier in the batch")
			require.NoError(t, placed[3].Err)
			var soldOut *stock.CheckoutError
			require.ErrorAs(t, placed[4].Err, &soldOut, "the stock of a ran out part way")
			assert.Equal(t, []string{a}, soldOut.SKUs)
			assert.NotEqual(t, placed[0].Checkout.CheckoutID, placed[3].Checkout.CheckoutID)
			for _, p := range []stock.Placed{placed[0], placed[3]} {
				require.Len(t, p.Checkout.Lines, 2)
				got, err := s.Read(ctx, stock.CheckoutRef(p.Checkout.CheckoutID))
				require.NoError(t, err)
				assert.Len(t, got.Lines, 2)
			}
			assert.Equal(t, int64(0), stockOf(t, s, a))
			assert.Equal(t, int64(3), stockOf(t, s, b))
		})
	}
}
