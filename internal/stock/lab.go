package stock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// PlaceOneForUpdate is the database lock as the sources (docs/sources.md) write it, kept — deliberately — so
// that the lab can measure it beside PlaceLocked: one order per transaction, on the store's main
// pool (the one every request of the service shares), the product row taken with SELECT ... FOR
// UPDATE and held for hold — the handler's own few milliseconds of work — before the order is
// decided and written. Under WaitForRow every concurrent order for a hot product parks a
// connection in the row's queue — for the server's lock wait, 50 s by default, so in practice
// until the request gives up — the orders behind them wait for a connection, and when the pool
// is spent, so does every other request of the service, whatever product it is for. NoWait gives
// the connection back at once, with ErrBusy. The service never calls it: PlaceLocked runs one
// section per product and instance (the batcher), with NOWAIT, or waiting a bounded time on a
// small pool of its own.
//
// It is for MySQL and MariaDB, whose row locks it measures.
func (s *Store) PlaceOneForUpdate(ctx context.Context, req OrderRequest, wait RowWait, hold time.Duration) (Order, error) {
	if s.dialect != MySQL {
		return Order{}, errors.New("PlaceOneForUpdate measures MySQL/MariaDB row locks; this store is " + string(s.dialect))
	}
	placed, err := s.placeLocked(ctx, s.db, rowLock(wait), []string{req.SKU}, func() []CheckoutRequest {
		select { // the row is locked now: the handler's work holds it
		case <-time.After(hold):
		case <-ctx.Done():
		}
		return []CheckoutRequest{OrderOf(req)}
	})
	if err != nil && ctx.Err() != nil {
		// The request gave up: the driver may report the query it cancelled as a bad connection.
		return Order{}, fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	if err != nil {
		return Order{}, err
	}
	return placed[0].Order()
}

// PoolStats are the statistics of the store's main connection pool — the one PlaceOneForUpdate
// spends, and PlaceLocked with NoWait — as database/sql keeps them: WaitCount and WaitDuration count the requests that found
// every connection in use. Collector exports the same figures as metrics.
func (s *Store) PoolStats() sql.DBStats {
	sqlDB, err := s.db.DB()
	if err != nil { // only a pool that is not a *sql.DB fails, and a Store's always is one
		return sql.DBStats{}
	}
	return sqlDB.Stats()
}

// LockRow is the row lock's acquire and release, alone, for the lab to count: a transaction
// that takes the product row with SELECT ... FOR UPDATE — waiting in the row's queue while
// another transaction holds it, until ctx ends — and commits at once, which releases it. It
// writes nothing, so what it measures is the lock and its round trips, not a sale; on the main
// pool, like PlaceOneForUpdate. A missing product is ErrNotFound; a wait the server ends
// (innodb_lock_wait_timeout, a deadlock) is ErrBusy.
//
// It is for MySQL and MariaDB, whose row locks it measures.
func (s *Store) LockRow(ctx context.Context, sku string) error {
	if s.dialect != MySQL {
		return errors.New("LockRow measures MySQL/MariaDB row locks; this store is " + string(s.dialect))
	}
	err := s.withTx(ctx, s.db, func(tx *gorm.DB) error {
		var row productRow
		return tx.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate}).Where("sku = ?", sku).Take(&row).Error
	})
	if err != nil {
		return fmt.Errorf("lock row %s: %w", sku, err)
	}
	return nil
}

// InsertLock is the lock table as the sources first write it, kept — deliberately — so that
// the lab can show what its expiry is for: a lock is taken by INSERTing its row (a duplicate key
// means it is taken) and released by DELETEing it (Unlock), and nothing else — no expiry anyone
// checks, no reclaim. A holder that dies before its DELETE leaves the row, and the lock, for
// good. The row's expire_at is the column's largest value, so that TryLock, should it meet the
// row, sees a lock that never expires either. It reports whether the lock was taken.
func (s *Store) InsertLock(ctx context.Context, name, holder string) (bool, error) {
	never := "9999-12-31 23:59:59.999999"
	if s.dialect != MySQL {
		never = "9999-12-31 23:59:59.999" // lockClock's format
	}
	err := classify(s.db.WithContext(ctx).Exec("INSERT INTO distributed_locks (lock_name, holder, expire_at) VALUES (?, ?, ?)",
		name, holder, never).Error)
	switch {
	case err == nil:
		return true, nil
	case isDuplicate(err, ""):
		return false, nil
	default:
		return false, fmt.Errorf("lock %s: insert: %w", name, err)
	}
}
