package stock

import (
	"context"
	"fmt"
	"time"
)

// The lock table of the classic comparison (distributed_locks): a lock is held while its row
// exists, unexpired by the database's clock, so skew between instances cannot expire a live one.

// TryLock makes one attempt to take the named lock for holder, for ttl, and reports whether it
// did: an INSERT, of which the primary key lets one win, or the reclaim of an expired row by an
// UPDATE that matches only while it is expired, so one reclaimer wins and a live lock is safe.
func (s *Store) TryLock(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	expiry, now, ttlArg := s.lockClock(ttl)
	db := s.db.WithContext(ctx)
	err := classify(db.Exec(
		"INSERT INTO distributed_locks (lock_name, holder, expire_at) VALUES (?, ?, "+expiry+")",
		name, holder, ttlArg).Error)
	if err == nil {
		return true, nil
	}
	if !isDuplicate(err) {
		return false, fmt.Errorf("lock %s: insert: %w", name, err)
	}
	res := db.Exec("UPDATE distributed_locks SET holder = ?, expire_at = "+expiry+
		" WHERE lock_name = ? AND expire_at < "+now, holder, ttlArg, name)
	if err := classify(res.Error); err != nil {
		return false, fmt.Errorf("lock %s: reclaim: %w", name, err)
	}
	return res.RowsAffected == 1, nil
}

// ExtendLock pushes the named lock's expiry to now + ttl if holder holds it unexpired, and
// reports whether it did. An expired lock is never revived: a reclaimer may be on its way.
func (s *Store) ExtendLock(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	expiry, now, ttlArg := s.lockClock(ttl)
	res := s.db.WithContext(ctx).Exec("UPDATE distributed_locks SET expire_at = "+expiry+
		" WHERE lock_name = ? AND holder = ? AND expire_at >= "+now, ttlArg, name, holder)
	if err := classify(res.Error); err != nil {
		return false, fmt.Errorf("extend lock %s: %w", name, err)
	}
	return res.RowsAffected == 1, nil
}

// LockTaken reports whether the named lock is held and unexpired, with a plain read. Waiters
// poll with it and try TryLock only when the lock looks free: every failed INSERT or UPDATE
// locks the row, and the holder's release would wait for (and deadlock with) those locks.
func (s *Store) LockTaken(ctx context.Context, name string) (bool, error) {
	_, now, _ := s.lockClock(0)
	var n int64
	err := classify(s.db.WithContext(ctx).Raw("SELECT COUNT(*) FROM distributed_locks WHERE lock_name = ? AND expire_at >= "+now, name).
		Scan(&n).Error)
	if err != nil {
		return false, fmt.Errorf("lock %s: read: %w", name, err)
	}
	return n > 0, nil
}

// Unlock releases the named lock if holder still holds it, and reports whether it did (false:
// the lock had been lost). It deletes only the holder's own row, never its successor's.
func (s *Store) Unlock(ctx context.Context, name, holder string) (bool, error) {
	res := s.db.WithContext(ctx).Exec("DELETE FROM distributed_locks WHERE lock_name = ? AND holder = ?", name, holder)
	if err := classify(res.Error); err != nil {
		return false, fmt.Errorf("unlock %s: %w", name, err)
	}
	return res.RowsAffected == 1, nil
}

// lockClock returns the dialect's SQL for "now + ttl" (with its one argument) and for "now".
func (s *Store) lockClock(ttl time.Duration) (expiry, now string, arg any) {
	if s.dialect == MySQL {
		return "NOW(6) + INTERVAL ? MICROSECOND", "NOW(6)", ttl.Microseconds()
	}
	const format = "'%Y-%m-%d %H:%M:%f'"
	return "strftime(" + format + ", 'now', ?)", "strftime(" + format + ", 'now')",
		fmt.Sprintf("%+.3f seconds", ttl.Seconds())
}
