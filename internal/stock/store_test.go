package stock_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

func newProduct(t *testing.T, s *stock.Store, units int64, maxPerOrder int) string {
	t.Helper()
	sku := backendtest.SKU(t)
	_, err := s.PutProduct(context.Background(), stock.ProductSpec{SKU: sku, Name: "test", Stock: units, MaxPerOrder: maxPerOrder})
	require.NoError(t, err)
	return sku
}

// noPause is a fenced write's beforeWrite that does nothing.
func noPause(context.Context) error { return nil }

// one places a batch of one order through a critical section and returns its answer.
func one(placed []stock.Placed, err error) (stock.Order, error) {
	if err != nil {
		return stock.Order{}, err
	}
	return placed[0].Order()
}

// orders are reqs as requests of one line each: a batch of orders.
func orders(reqs ...stock.OrderRequest) []stock.CheckoutRequest {
	out := make([]stock.CheckoutRequest, len(reqs))
	for i, r := range reqs {
		out[i] = stock.OrderOf(r)
	}
	return out
}

// placeAt places req at the product's current version, as an optimistic strategy does.
func placeAt(t *testing.T, s *stock.Store, req stock.OrderRequest) (stock.Order, error) {
	t.Helper()
	p, err := s.Product(context.Background(), req.SKU)
	if err != nil {
		return stock.Order{}, err
	}
	return one(s.PlaceAt(context.Background(), orders(req), []stock.Product{p}))
}

// placeLocked places req under the product's row lock, as the pessimistic strategy does.
func placeLocked(s *stock.Store, req stock.OrderRequest) (stock.Order, error) {
	return one(s.PlaceLocked(context.Background(), []string{req.SKU}, stock.NoWait, func() []stock.CheckoutRequest { return orders(req) }))
}

// placeFenced places req with an etcd fencing token, as the etcd strategy does.
func placeFenced(s *stock.Store, req stock.OrderRequest, fence int64) (stock.Order, error) {
	return one(s.PlaceFenced(context.Background(), orders(req), map[string]stock.Token{req.SKU: {Fence: stock.EtcdFence, Value: fence}}, noPause))
}

func order(sku, user string) stock.OrderRequest {
	return stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "test"}
}

func TestPutProductStartsANewRound(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	sku := newProduct(t, s, 5, 2)
	first, err := s.Product(ctx, sku)
	require.NoError(t, err)
	_, err = placeAt(t, s, stock.OrderRequest{SKU: sku, UserID: "u1", Quantity: 2, Strategy: "test"})
	require.NoError(t, err)

	again, err := s.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: "renamed", Stock: 7, MaxPerOrder: 1})
	require.NoError(t, err)
	assert.Equal(t, stock.Product{SKU: sku, Name: "renamed", InitialStock: 7, Stock: 7, Version: first.Version + 2, MaxPerOrder: 1}, again,
		"a reset keeps raising the version: a writer holding a version of the old round can never write")
	a, err := s.Audit(ctx, sku)
	require.NoError(t, err)
	assert.Zero(t, a.Orders, "the old round's orders are gone")
	_, err = placeAt(t, s, order(sku, "u1"))
	assert.NoError(t, err, "the buyer of the old round may buy in the new one")
}

// TestResetsAtOnce: sale rounds of new products started at once, as parallel tests and a shop's
// admins do. Their update and insert lock neighbouring gaps, and MySQL picks deadlock victims
// among them; every reset still succeeds, none answers busy.
func TestResetsAtOnce(t *testing.T) {
	s := backendtest.Store(t)
	prefix := backendtest.SKU(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 15 {
				sku := fmt.Sprintf("%s-%02d-%d", prefix, i, g) // neighbours in the index, written at once
				_, err := s.PutProduct(context.Background(), stock.ProductSpec{SKU: sku, Name: "at once", Stock: 1, MaxPerOrder: 1})
				assert.NoError(t, err, "reset of %s", sku)
			}
		})
	}
	wg.Wait()
}

func TestOrderRules(t *testing.T) {
	s := backendtest.Store(t)
	sku := newProduct(t, s, 3, 2)
	_, err := placeLocked(s, stock.OrderRequest{SKU: sku, UserID: "big", Quantity: 3, Strategy: "test"})
	assert.ErrorIs(t, err, stock.ErrInvalid, "quantity above max_per_order")
	_, err = placeLocked(s, stock.OrderRequest{SKU: "no-such-sku", UserID: "u", Quantity: 1, Strategy: "test"})
	assert.ErrorIs(t, err, stock.ErrNotFound)
	placed, err := placeLocked(s, stock.OrderRequest{SKU: sku, UserID: "u1", Quantity: 2, Strategy: "test"})
	require.NoError(t, err)
	_, err = placeAt(t, s, order(sku, "u1"))
	assert.ErrorIs(t, err, stock.ErrAlreadyPurchased)
	_, err = placeAt(t, s, stock.OrderRequest{SKU: sku, UserID: "u2", Quantity: 2, Strategy: "test"})
	assert.ErrorIs(t, err, stock.ErrSoldOut, "one unit left, two asked")
	backendtest.RequireInvariant(t, s, sku, []stock.Order{placed})
}

// TestStaleVersionWritesNothing is the final guarantee of every optimistic strategy: a writer
// whose read is stale (its lock expired, another writer sold since) matches no row and writes
// nothing at all.
func TestStaleVersionWritesNothing(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	sku := newProduct(t, s, 5, 1)
	stale, err := s.Product(ctx, sku)
	require.NoError(t, err)
	at := func(req stock.OrderRequest) (stock.Order, error) {
		return one(s.PlaceAt(ctx, orders(req), []stock.Product{stale}))
	}
	first, err := at(order(sku, "u1"))
	require.NoError(t, err)
	_, err = at(order(sku, "u2"))
	assert.ErrorIs(t, err, stock.ErrVersionConflict)
	_, err = at(order(sku, "u3"))
	assert.ErrorIs(t, err, stock.ErrVersionConflict, "nothing is written at a stale version")
	a := backendtest.RequireInvariant(t, s, sku, []stock.Order{first})
	assert.EqualValues(t, 4, a.Stock)
	buyers, err := s.Buyers(ctx, sku)
	require.NoError(t, err)
	assert.Equal(t, []string{"u1"}, buyers)
}

// TestFence: a write under an older fencing token than the last one written is refused and
// writes nothing; sold out is still reported as sold out; a reset clears the fence.
func TestFence(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	sku := newProduct(t, s, 2, 1)
	_, err := placeFenced(s, order(sku, "a"), 10)
	require.NoError(t, err)
	_, err = placeFenced(s, order(sku, "b"), 20)
	require.NoError(t, err)
	p, err := s.Product(ctx, sku)
	require.NoError(t, err)
	assert.EqualValues(t, 20, p.Fence)

	_, err = s.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: "again", Stock: 3, MaxPerOrder: 1})
	require.NoError(t, err)
	p, _ = s.Product(ctx, sku)
	assert.Zero(t, p.Fence, "a reset clears the fence")
	a, err := placeFenced(s, order(sku, "a"), 30)
	require.NoError(t, err)
	_, err = placeFenced(s, order(sku, "stale"), 29)
	var fenced *stock.FenceError
	require.ErrorAs(t, err, &fenced)
	assert.Equal(t, stock.FenceError{SKU: sku, Token: stock.Token{Fence: stock.EtcdFence, Value: 29}, Fence: 30}, *fenced)
	assert.ErrorIs(t, err, stock.ErrFencedOut)
	b, err := placeFenced(s, order(sku, "b"), 30)
	require.NoError(t, err, "the same token may write again: it is not older")

	require.NoError(t, s.ResetFence(ctx, sku, stock.EtcdFence, 999), "a reset of a fence that moved on does nothing")
	p, _ = s.Product(ctx, sku)
	assert.EqualValues(t, 30, p.Fence)
	require.NoError(t, s.ResetFence(ctx, sku, stock.EtcdFence, 30))
	c, err := placeFenced(s, order(sku, "c"), 1)
	require.NoError(t, err, "after the reset, a restarted cluster's small revisions write again")
	_, err = placeFenced(s, order(sku, "d"), 1)
	assert.ErrorIs(t, err, stock.ErrSoldOut, "sold out is reported as such, not as a fence error")
	backendtest.RequireInvariant(t, s, sku, []stock.Order{a, b, c})
}

// TestFencesOfTwoServices: etcd revisions and ZooKeeper zxids are different sequences, so each
// has its own fence: a product sold under one lock service and then the other never compares a
// zxid with a revision — neither stalls the other — while each still refuses its own older tokens.
func TestFencesOfTwoServices(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	sku := newProduct(t, s, 4, 1)
	zk := func(user string, zxid int64) (stock.Order, error) {
		return one(s.PlaceFenced(ctx, orders(order(sku, user)), map[string]stock.Token{sku: {Fence: stock.ZooKeeperFence, Value: zxid}}, noPause))
	}
	a, err := placeFenced(s, order(sku, "a"), 1_000_000) // a long-lived etcd cluster: large revisions
	require.NoError(t, err)
	b, err := zk("b", 7) // a young ensemble: small zxids
	require.NoError(t, err, "a zxid is not compared with a revision")
	_, err = zk("stale", 6)
	assert.ErrorIs(t, err, stock.ErrFencedOut, "an older zxid is still refused")
	c, err := placeFenced(s, order(sku, "c"), 1_000_001)
	require.NoError(t, err, "and a revision not with a zxid")
	p, err := s.Product(ctx, sku)
	require.NoError(t, err)
	assert.EqualValues(t, 1_000_001, p.Fence)
	assert.EqualValues(t, 7, p.ZKFence)
	backendtest.RequireInvariant(t, s, sku, []stock.Order{a, b, c})
}

func TestIdempotencyKeyIsUnique(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	sku := newProduct(t, s, 5, 1)
	key := "key-" + sku
	req := order(sku, "u1")
	req.IdempotencyKey = key
	placed, err := placeAt(t, s, req)
	require.NoError(t, err)
	other := order(sku, "u2")
	other.IdempotencyKey = key
	_, err = placeAt(t, s, other)
	assert.ErrorIs(t, err, stock.ErrDuplicateRequest)
	found, err := s.OrderByIdempotencyKey(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, placed, found)
	assert.Equal(t, req.Fingerprint(), found.RequestHash)
	used, err := s.KeysUsed(ctx, []string{key, "unused-" + sku})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{key: placed.OrderID}, used, "the written order's key, and no other")
	backendtest.RequireInvariant(t, s, sku, []stock.Order{placed})
}

// TestIdleTransactionReleasesRow stops a holder in the middle of its transaction, with the
// product row locked, as a frozen process would (its take blocks): the server ends the idle
// transaction after the store's bound, another store's write goes through, and the frozen
// holder's write never lands — answered busy (tx_ended), not unavailable: the database serves.
func TestIdleTransactionReleasesRow(t *testing.T) {
	backendtest.NeedMySQL(t, "the embedded store has no idle-transaction bound (one process, one writer)")
	ctx := context.Background()
	holder, other := backendtest.Store(t), backendtest.Store(t)
	sku := newProduct(t, holder, 5, 1)
	frozen, wake := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := holder.PlaceLocked(ctx, []string{sku}, stock.NoWait, func() []stock.CheckoutRequest {
			close(frozen)
			<-wake
			return orders(order(sku, "frozen"))
		})
		done <- err
	}()
	<-frozen
	start := time.Now()
	o, err := placeAt(t, other, order(sku, "other"))
	require.NoError(t, err, "the row was freed")
	waited := time.Since(start)
	t.Logf("the row held by a frozen transaction was free after %s", waited.Round(10*time.Millisecond))
	assert.Less(t, waited, 4*time.Second, "within the bound (2s) and a margin")
	close(wake)
	err = <-done
	assert.ErrorIs(t, err, stock.ErrBusy, "the frozen holder's transaction was ended: its write fails, busy")
	assert.NotErrorIs(t, err, stock.ErrUnavailable, "a transaction the database ended is busy, not unavailable: the database serves")
	assert.Equal(t, stock.BusyTxEnded, stock.CauseOfBusy(err))
	assert.NotErrorIs(t, err, stock.ErrOutcomeUnknown, "ended before its COMMIT: certainly not written")
	backendtest.RequireInvariant(t, holder, sku, []stock.Order{o})
}

// TestRowLockWaitBounded holds the product row (or, on SQLite, the write lock) from another
// client and checks that the pessimistic critical section answers busy, taking no orders: with
// NoWait at once, and waiting for the row only once its lock wait has run out (SQLite: at once
// too, it has no lock queue) instead of without end. Once the row is free, either places orders.
func TestRowLockWaitBounded(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	sku := newProduct(t, s, 5, 1)
	other, err := backendtest.SQL(t).Conn(ctx)
	require.NoError(t, err)
	defer other.Close()
	if backendtest.Dialect(t) == stock.MySQL {
		_, err = other.ExecContext(ctx, "BEGIN")
		require.NoError(t, err)
		_, err = other.ExecContext(ctx, "SELECT stock FROM products WHERE sku = ? FOR UPDATE", sku)
	} else {
		_, err = other.ExecContext(ctx, "BEGIN IMMEDIATE")
	}
	require.NoError(t, err)

	for _, wait := range []stock.RowWait{stock.NoWait, stock.WaitForRow} {
		start := time.Now()
		taken := false
		_, err = s.PlaceLocked(ctx, []string{sku}, wait, func() []stock.CheckoutRequest {
			taken = true
			return orders(order(sku, "u1"), order(sku, "u2"))
		})
		took := time.Since(start)
		assert.ErrorIs(t, err, stock.ErrBusy, "%s: busy while the row is held", wait)
		assert.False(t, taken, "%s: no orders are taken without the row", wait)
		t.Logf("%s: busy answered after %s", wait, took)
		if wait == stock.NoWait || backendtest.Dialect(t) != stock.MySQL {
			assert.Less(t, took, time.Second, "%s: at once", wait)
		} else {
			assert.GreaterOrEqual(t, took, time.Second, "wait: in the row's queue until the lock wait (2s) ran out")
			assert.Less(t, took, 10*time.Second, "wait: the wait is bounded")
		}
	}

	_, err = other.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	placed, err := placeLocked(s, order(sku, "u1"))
	require.NoError(t, err)
	batch, err := s.PlaceLocked(ctx, []string{sku}, stock.WaitForRow, func() []stock.CheckoutRequest {
		return orders(order(sku, "u1"), order(sku, "u2"), order(sku, "u3"))
	})
	require.NoError(t, err)
	assert.ErrorIs(t, batch[0].Err, stock.ErrAlreadyPurchased)
	require.NoError(t, batch[1].Err)
	require.NoError(t, batch[2].Err)
	backendtest.RequireInvariant(t, s, sku, []stock.Order{placed, batch[1].Checkout.Lines[0], batch[2].Checkout.Lines[0]})
}

func TestLockTable(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	name := "lock/" + backendtest.SKU(t)
	t.Cleanup(func() { _, _ = s.Unlock(ctx, name, "h1"); _, _ = s.Unlock(ctx, name, "h2") })

	taken, err := s.LockTaken(ctx, name)
	require.NoError(t, err)
	assert.False(t, taken, "no row: free")
	took, err := s.TryLock(ctx, name, "h1", time.Minute)
	require.NoError(t, err)
	assert.True(t, took)
	taken, err = s.LockTaken(ctx, name)
	require.NoError(t, err)
	assert.True(t, taken, "a live row: taken")
	took, err = s.TryLock(ctx, name, "h2", time.Minute)
	require.NoError(t, err)
	assert.False(t, took, "a live lock is exclusive")
	released, err := s.Unlock(ctx, name, "h2")
	require.NoError(t, err)
	assert.False(t, released, "only the holder releases")
	took, _ = s.TryLock(ctx, name, "h2", time.Minute)
	assert.False(t, took, "a stranger's unlock left the lock in place")
	extended, err := s.ExtendLock(ctx, name, "h1", time.Minute)
	require.NoError(t, err)
	assert.True(t, extended, "the holder extends its lock")
	extended, err = s.ExtendLock(ctx, name, "h2", time.Minute)
	require.NoError(t, err)
	assert.False(t, extended, "a stranger cannot")
	released, err = s.Unlock(ctx, name, "h1")
	require.NoError(t, err)
	assert.True(t, released)

	// An expired lock is reclaimed, and its old holder can no longer release it.
	took, _ = s.TryLock(ctx, name, "h1", 50*time.Millisecond)
	require.True(t, took)
	require.Eventually(t, func() bool {
		taken, err := s.LockTaken(ctx, name)
		return err == nil && !taken
	}, 5*time.Second, 10*time.Millisecond, "an expired row: free to reclaim")
	took, err = s.TryLock(ctx, name, "h2", time.Minute)
	require.NoError(t, err)
	assert.True(t, took, "an expired lock is reclaimed")
	released, _ = s.Unlock(ctx, name, "h1")
	assert.False(t, released, "the expired holder cannot release its successor's lock")
	extended, _ = s.ExtendLock(ctx, name, "h1", time.Minute)
	assert.False(t, extended, "nor extend it")
	released, _ = s.Unlock(ctx, name, "h2")
	assert.True(t, released)
}

// TestLockTableExclusive: 30 clients on three stores race for one lock-table lock. Two holders
// never overlap: a second winner is possible only once the first one's lock has expired (round
// 0's lock lives 50 ms, and a client delayed that long by a loaded machine may reclaim it —
// fairly), so every winner must come a whole TTL after the one before. Round 1's lock (a
// minute) has exactly one winner, which reclaimed round 0's expired lock.
func TestLockTableExclusive(t *testing.T) {
	ctx := context.Background()
	name := "lock/" + backendtest.SKU(t)
	stores := []*stock.Store{backendtest.Store(t), backendtest.Store(t), backendtest.Store(t)}
	type win struct{ called, returned time.Time }
	for round, ttl := range []time.Duration{50 * time.Millisecond, time.Minute} {
		var (
			mu   sync.Mutex
			wins []win
			wg   sync.WaitGroup
		)
		start := make(chan struct{})
		for i := range 30 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				called := time.Now()
				took, err := stores[i%len(stores)].TryLock(ctx, name, fmt.Sprintf("r%d-h%d", round, i), ttl)
				if err == nil && took {
					mu.Lock()
					wins = append(wins, win{called, time.Now()})
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		require.NotEmpty(t, wins, "round %d: nobody took the lock", round)
		slices.SortFunc(wins, func(a, b win) int { return a.returned.Compare(b.returned) })
		for i := 1; i < len(wins); i++ {
			// The earlier winner held the lock from no sooner than its call, for ttl; the later
			// one took it no later than its return.
			assert.GreaterOrEqual(t, wins[i].returned.Sub(wins[i-1].called), ttl, "round %d: two holders at once", round)
		}
		if round == 1 {
			assert.Len(t, wins, 1, "a lock that lives a minute has one winner")
			continue
		}
		require.Eventually(t, func() bool { // round 0's lock expired: round 1 reclaims it
			taken, err := stores[0].LockTaken(ctx, name)
			return err == nil && !taken
		}, 5*time.Second, 10*time.Millisecond, "round 0's lock never expired")
	}
}

// TestMigrateConcurrently starts three instances on one database at once, as three replicas of a
// deployment would: migrations run once and nobody fails.
func TestMigrateConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		s := backendtest.Store(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Migrate(context.Background(), slog.New(slog.DiscardHandler))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		assert.NoError(t, err)
	}
}

// TestPlaceAt: a batch takes stock in arrival order with one conditional update and one insert,
// and every order gets its own answer; a stale version writes nothing at all.
func TestPlaceAt(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	sku := newProduct(t, s, 3, 2)
	prior, err := placeAt(t, s, order(sku, "before"))
	require.NoError(t, err)
	elsewhere := order(newProduct(t, s, 1, 1), "elsewhere")
	elsewhere.IdempotencyKey = "used-" + sku
	_, err = placeAt(t, s, elsewhere)
	require.NoError(t, err)
	read, err := s.Product(ctx, sku)
	require.NoError(t, err)

	keyed := order(sku, "k1")
	keyed.IdempotencyKey = "key-" + sku
	sameKey := order(sku, "k2")
	sameKey.IdempotencyKey = keyed.IdempotencyKey
	reused := order(sku, "k3")
	reused.IdempotencyKey = elsewhere.IdempotencyKey
	two := stock.OrderRequest{SKU: sku, UserID: "two", Quantity: 2, Strategy: "test"}
	batch := []stock.OrderRequest{
		order(sku, "a"),
		order(sku, "before"), // bought earlier
		{SKU: sku, UserID: "greedy", Quantity: 3, Strategy: "test"}, // over max_per_order
		order(sku, "a"), // twice in the batch
		keyed,
		sameKey, // its key is already in the batch
		reused,  // its key is already stored, for another product
		two,     // one unit left
	}
	res, err := s.PlaceAt(ctx, orders(batch...), []stock.Product{read})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	assert.ErrorIs(t, res[1].Err, stock.ErrAlreadyPurchased)
	assert.ErrorIs(t, res[2].Err, stock.ErrInvalid)
	assert.ErrorIs(t, res[3].Err, stock.ErrAlreadyPurchased)
	require.NoError(t, res[4].Err)
	assert.ErrorIs(t, res[5].Err, stock.ErrDuplicateRequest)
	assert.ErrorIs(t, res[6].Err, stock.ErrDuplicateRequest, "fails alone, not the batch")
	var soldOut *stock.SoldOutError
	require.ErrorAs(t, res[7].Err, &soldOut)
	assert.EqualValues(t, 0, soldOut.Left)
	after, err := s.Product(ctx, sku)
	require.NoError(t, err)
	assert.Equal(t, read.Version+1, after.Version, "one update for the whole batch")

	_, err = s.PlaceAt(ctx, orders(order(sku, "late")), []stock.Product{read})
	assert.ErrorIs(t, err, stock.ErrVersionConflict, "a stale read writes nothing")
	backendtest.RequireInvariant(t, s, sku, []stock.Order{prior, res[0].Checkout.Lines[0], res[4].Checkout.Lines[0]})
}

// TestPlaceAdmitted: a batch placed without the lookup of stored buyers and keys (orders
// admission vouched for) sells in one update when nothing conflicts; a buyer who already holds
// an order — one admission missed — fails the insert, writes nothing for the whole batch, and
// comes back as a version conflict; PlaceAt, which looks, then answers each order on its own.
func TestPlaceAdmitted(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	sku := newProduct(t, s, 5, 1)
	prior, err := placeAt(t, s, order(sku, "before"))
	require.NoError(t, err)
	read, err := s.Product(ctx, sku)
	require.NoError(t, err)

	ok, err := s.PlaceAdmitted(ctx, orders(order(sku, "a"), order(sku, "b")), []stock.Product{read})
	require.NoError(t, err)
	require.NoError(t, ok[0].Err)
	require.NoError(t, ok[1].Err)
	read, err = s.Product(ctx, sku)
	require.NoError(t, err)

	missed := []stock.OrderRequest{order(sku, "c"), order(sku, "before")}
	_, err = s.PlaceAdmitted(ctx, orders(missed...), []stock.Product{read})
	require.ErrorIs(t, err, stock.ErrVersionConflict)
	unchanged, err := s.Product(ctx, sku)
	require.NoError(t, err)
	assert.Equal(t, read, unchanged, "nothing of the batch was written")
	res, err := s.PlaceAt(ctx, orders(missed...), []stock.Product{read})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	assert.ErrorIs(t, res[1].Err, stock.ErrAlreadyPurchased)
	backendtest.RequireInvariant(t, s, sku, []stock.Order{prior, ok[0].Checkout.Lines[0], ok[1].Checkout.Lines[0], res[0].Checkout.Lines[0]})
}

// onSaleFor puts a product on sale whose orders wait timeout for payment.
func onSaleFor(t *testing.T, s *stock.Store, units int64, timeout time.Duration) string {
	t.Helper()
	sku := backendtest.SKU(t)
	_, err := s.PutProduct(context.Background(), stock.ProductSpec{SKU: sku, Name: "test", Stock: units, MaxPerOrder: 1, PaymentTimeout: timeout})
	require.NoError(t, err)
	return sku
}

// TestOrderLifecycle walks the state machine: a new order is pending until paid (confirmed) or
// cancelled; a cancel gives the unit back once however often it is asked; a payment after the
// deadline is refused and the unit comes back once; one active order per buyer, so a buyer
// whose order ended may buy again; another user's order is not found.
func TestOrderLifecycle(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	sku := onSaleFor(t, s, 3, time.Hour)

	a, err := placeAt(t, s, order(sku, "a"))
	require.NoError(t, err)
	assert.Equal(t, stock.Pending, a.Status)
	assert.WithinDuration(t, time.Now().Add(time.Hour), a.ExpiresAt, time.Minute)
	_, err = s.Pay(ctx, stock.OrderRef(a.OrderID), "someone-else")
	assert.ErrorIs(t, err, stock.ErrNotFound, "another user's order")
	paid, err := s.Pay(ctx, stock.OrderRef(a.OrderID), "a")
	require.NoError(t, err)
	assert.Equal(t, stock.Confirmed, paid.Status)
	assert.True(t, paid.ExpiresAt.IsZero())
	again, err := s.Pay(ctx, stock.OrderRef(a.OrderID), "a")
	require.NoError(t, err, "paying twice is fine")
	assert.Equal(t, stock.Confirmed, again.Status)

	for range 3 {
		c, err := s.Cancel(ctx, stock.OrderRef(a.OrderID), "a")
		require.NoError(t, err)
		assert.Equal(t, stock.Cancelled, c.Status)
	}
	p, err := s.Product(ctx, sku)
	require.NoError(t, err)
	assert.EqualValues(t, 3, p.Stock, "the unit came back once")
	_, err = s.Pay(ctx, stock.OrderRef(a.OrderID), "a")
	assert.ErrorIs(t, err, stock.ErrOrderCancelled)

	b, err := placeAt(t, s, order(sku, "a"))
	require.NoError(t, err, "after a cancel the buyer may buy again")
	_, err = placeAt(t, s, order(sku, "a"))
	assert.ErrorIs(t, err, stock.ErrAlreadyPurchased, "one active order per buyer")
	c, err := s.Cancel(ctx, stock.OrderRef(b.OrderID), "")
	require.NoError(t, err, "the admin may cancel any order")
	assert.Equal(t, stock.Cancelled, c.Status)

	restocks, err := s.Restocks(ctx, 100)
	require.NoError(t, err)
	var ids []string
	for _, r := range restocks {
		if r.SKU == sku {
			ids = append(ids, r.OrderID)
		}
	}
	assert.ElementsMatch(t, []string{a.OrderID, b.OrderID}, ids, "both returns wait for Redis admission")
	require.NoError(t, s.Restocked(ctx, ids))
	restocks, err = s.Restocks(ctx, 100)
	require.NoError(t, err)
	for _, r := range restocks {
		assert.NotEqual(t, sku, r.SKU)
	}
	a1, err := s.Audit(ctx, sku)
	require.NoError(t, err)
	assert.Equal(t, stock.Audit{SKU: sku, InitialStock: 3, Stock: 3, Cancelled: 2}, a1)
}

// TestExpiry: a pending order past its deadline reads as expired at once, and its unit comes
// back exactly once — whether the expirer gets there (several of them racing) or a late
// payment or cancel does.
func TestExpiry(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	sku := onSaleFor(t, s, 4, time.Second)
	var orders []stock.Order
	for _, user := range []string{"late-payer", "late-canceller", "x", "y"} {
		o, err := placeAt(t, s, order(sku, user))
		require.NoError(t, err)
		orders = append(orders, o)
	}
	// The deadline is the database clock's: the last order reads expired once it has passed
	// there, and every order before it with it.
	require.Eventually(t, func() bool {
		got, err := s.Order(ctx, orders[3].OrderID)
		return err == nil && got.Status == stock.Expired
	}, 5*time.Second, 10*time.Millisecond, "the last order never read as expired")
	got, err := s.Order(ctx, orders[2].OrderID)
	require.NoError(t, err)
	assert.Equal(t, stock.Expired, got.Status, "a pending order past its deadline reads as expired")
	many, err := s.Orders(ctx, []string{orders[2].OrderID, orders[3].OrderID, "no-such-order"})
	require.NoError(t, err)
	assert.Len(t, many, 2, "the orders read together are those that exist")
	for _, id := range []string{orders[2].OrderID, orders[3].OrderID} {
		assert.Equal(t, stock.Expired, many[id].Status, "an order read with others past its deadline reads as expired")
	}

	_, err = s.Pay(ctx, stock.OrderRef(orders[0].OrderID), "late-payer")
	assert.ErrorIs(t, err, stock.ErrOrderExpired, "a late payment is refused")
	_, err = s.Cancel(ctx, stock.OrderRef(orders[1].OrderID), "late-canceller")
	assert.ErrorIs(t, err, stock.ErrOrderExpired)
	var wg sync.WaitGroup
	var expired atomic.Int32
	stores := []*stock.Store{s, backendtest.Store(t), backendtest.Store(t)}
	for _, st := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done, err := st.ExpireDue(ctx, 100)
			assert.NoError(t, err)
			for _, o := range done {
				if o.SKU == sku {
					expired.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 2, expired.Load(), "the other two expire, once, though three expirers raced")
	_, err = s.Pay(ctx, stock.OrderRef(orders[0].OrderID), "late-payer")
	assert.ErrorIs(t, err, stock.ErrOrderExpired, "still refused")
	a, err := s.Audit(ctx, sku)
	require.NoError(t, err)
	assert.Equal(t, stock.Audit{SKU: sku, InitialStock: 4, Stock: 4, Expired: 4}, a, "every unit back, once")
}

// TestSaleWindow: orders are taken in [starts_at, ends_at) by the database's clock.
func TestSaleWindow(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	for _, tc := range []struct {
		name   string
		window stock.Window
		want   error
	}{
		{"open", stock.Window{Starts: time.Now().Add(-time.Minute), Ends: time.Now().Add(time.Minute)}, nil},
		{"not started", stock.Window{Starts: time.Now().Add(time.Minute)}, stock.ErrSaleNotStarted},
		{"ended", stock.Window{Ends: time.Now().Add(-time.Second)}, stock.ErrSaleEnded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sku := backendtest.SKU(t)
			_, err := s.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: "w", Stock: 1, MaxPerOrder: 1, Window: tc.window})
			require.NoError(t, err)
			p, err := s.Product(ctx, sku)
			require.NoError(t, err)
			assert.True(t, p.Window.Starts.Equal(tc.window.Starts.Truncate(time.Microsecond)), "starts_at round-trips")
			_, err = placeLocked(s, order(sku, "u"))
			if tc.want == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tc.want)
			}
		})
	}
}
