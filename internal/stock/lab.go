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

// PlaceOneForUpdate is the database lock as the sources (docs/sources.md) write it, for the lab
// to measure beside PlaceLocked: one order per transaction on the main pool, the row held by
// SELECT ... FOR UPDATE for hold (the handler's work). Under WaitForRow each order for a hot
// product parks a connection in the row's queue (50 s by default); once the pool is spent, every
// request waits. NoWait gives it back at once, with ErrBusy. MySQL and MariaDB only.
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

// LockRow takes the product row (SELECT ... FOR UPDATE, waiting until ctx ends) and commits at
// once: the lock and its round trips alone, for the lab to count. A missing product is
// ErrNotFound; a wait the server ends, ErrBusy. MySQL and MariaDB only.
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

// InsertLock is the lock table as the sources first write it, for the lab to show what expiry is
// for: INSERT takes the lock, DELETE (Unlock) releases it, nothing reclaims it, so a holder that
// dies first holds it for good (expire_at never comes). It reports whether the lock was taken.
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
