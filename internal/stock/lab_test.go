package stock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

// TestPlaceOneForUpdate holds the product row from another client: the sources' form waits for
// it, a connection of the pool held all the while, until the request gives up (the test gives
// up once it has seen the connection held); NOWAIT answers busy at once. Once the row is free, either places the order, holding the row for hold first.
func TestPlaceOneForUpdate(t *testing.T) {
	backendtest.NeedMySQL(t, "the embedded store has no row locks")
	ctx := context.Background()
	s := backendtest.Store(t)
	sku := newProduct(t, s, 5, 1)
	other := backendtest.HoldRow(t, sku)

	start := time.Now()
	_, err := s.PlaceOneForUpdate(ctx, order(sku, "u1"), stock.NoWait, 0)
	assert.ErrorIs(t, err, stock.ErrBusy, "NOWAIT: busy while another transaction has the row")
	assert.Less(t, time.Since(start), time.Second, "at once")

	waitCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	waited := make(chan error, 1)
	go func() {
		_, err := s.PlaceOneForUpdate(waitCtx, order(sku, "u1"), stock.WaitForRow, 0)
		waited <- err
	}()
	require.Eventually(t, func() bool { return s.PoolStats().InUse == 1 }, 5*time.Second, time.Millisecond,
		"the waiting order holds a connection of the pool")
	select {
	case err := <-waited:
		t.Fatalf("the order did not wait for the row: %v", err)
	default:
	}
	giveUp()
	assert.ErrorIs(t, <-waited, context.Canceled, "it waits for the row until the request gives up")

	_, err = other.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	hold := 50 * time.Millisecond
	start = time.Now()
	placed, err := s.PlaceOneForUpdate(ctx, order(sku, "u1"), stock.WaitForRow, hold)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), hold, "the row is held for hold before the order is written")
	_, err = s.PlaceOneForUpdate(ctx, order(sku, "u1"), stock.NoWait, 0)
	assert.ErrorIs(t, err, stock.ErrAlreadyPurchased, "decided by the same rules as every section")
	backendtest.RequireInvariant(t, s, sku, []stock.Order{placed})
}

// TestLockRow holds the product row from another client: LockRow waits in the row's queue until
// its request gives up; once the row is free it takes and releases it, and the row is free
// again for the other client at once. A missing product is ErrNotFound.
func TestLockRow(t *testing.T) {
	backendtest.NeedMySQL(t, "the embedded store has no row locks")
	ctx := context.Background()
	s := backendtest.Store(t)
	sku := newProduct(t, s, 5, 1)
	other := backendtest.HoldRow(t, sku)

	waitCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, s.LockRow(waitCtx, sku), context.DeadlineExceeded, "it waits for the held row until the request gives up")

	_, err := other.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	require.NoError(t, s.LockRow(ctx, sku))
	// The commit released it: another transaction's NOWAIT finds the row free.
	_, err = other.ExecContext(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = other.ExecContext(ctx, "SELECT stock FROM products WHERE sku = ? FOR UPDATE NOWAIT", sku)
	assert.NoError(t, err, "LockRow released the row")
	_, err = other.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)

	assert.ErrorIs(t, s.LockRow(ctx, sku+"-missing"), stock.ErrNotFound)
}

// TestInsertLock: the lock without expiry is taken by one INSERT and refused to everyone after —
// its holder too — however long they wait and whatever TryLock would reclaim; only the holder's
// DELETE frees it.
func TestInsertLock(t *testing.T) {
	ctx := context.Background()
	s := backendtest.Store(t)
	name := t.Name()
	t.Cleanup(func() { _, _ = s.Unlock(context.Background(), name, "holder-1") })

	ok, err := s.InsertLock(ctx, name, "holder-1")
	require.NoError(t, err)
	require.True(t, ok, "the first INSERT takes the lock")
	for _, holder := range []string{"holder-2", "holder-1"} {
		ok, err = s.InsertLock(ctx, name, holder)
		require.NoError(t, err)
		assert.False(t, ok, "%s: a duplicate key", holder)
	}
	ok, err = s.TryLock(ctx, name, "holder-2", time.Millisecond)
	require.NoError(t, err)
	assert.False(t, ok, "TryLock finds a lock that never expires, and reclaims nothing")
	taken, err := s.LockTaken(ctx, name)
	require.NoError(t, err)
	assert.True(t, taken)

	released, err := s.Unlock(ctx, name, "holder-1")
	require.NoError(t, err)
	require.True(t, released, "the holder's DELETE")
	ok, err = s.InsertLock(ctx, name, "holder-2")
	require.NoError(t, err)
	assert.True(t, ok, "free once deleted")
	_, _ = s.Unlock(ctx, name, "holder-2")
}
