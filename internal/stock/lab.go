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

// PlaceOneForUpdate is the database lock as the sources (docs/sources.md) write it, kept so that
// the lab can measure it beside PlaceLocked: one order per transaction on the main pool, the
// product row taken with SELECT ... FOR UPDATE and held for hold (the handler's work) before the
// order is decided and written. Under WaitForRow every order for a hot product parks a
// connection in the row's queue (for the server's lock wait, 50 s by default); when the pool is
// spent, every other request of the service waits too. NoWait gives the connection back at once,
// with ErrBusy. The service never calls it. It is for MySQL and MariaDB, whose row locks it
// measures.
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

// PoolStats are the statistics of the store's main connection pool, the one PlaceOneForUpdate
// spends: WaitCount and WaitDuration count the requests that found every connection in use.
func (s *Store) PoolStats() sql.DBStats {
	sqlDB, err := s.db.DB()
	if err != nil { // only a pool that is not a *sql.DB fails, and a Store's always is one
		return sql.DBStats{}
	}
	return sqlDB.Stats()
}

// LockRow is the row lock's acquire and release, alone, for the lab to count: a transaction on
// the main pool takes the product row with SELECT ... FOR UPDATE, waiting until ctx ends, and
// commits at once. It writes nothing, so it measures the lock and its round trips, not a sale.
// A missing product is ErrNotFound; a wait the server ends is ErrBusy. MySQL and MariaDB only.
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

// InsertLock is the lock table as the sources first write it, kept so that the lab can show what
// its expiry is for: a lock is taken by INSERTing its row and released by DELETEing it (Unlock),
// with no expiry and no reclaim. A holder that dies before its DELETE holds the lock for good
// (expire_at is the largest value, so TryLock sees it never expire). It reports whether the lock
// was taken.
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
	case isDuplicate(err):
		return false, nil
	default:
		return false, fmt.Errorf("lock %s: insert: %w", name, err)
	}
}
