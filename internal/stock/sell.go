package stock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/flashsale/seckill/internal/freezepoint"
	"github.com/flashsale/seckill/internal/planted"
)

// The critical sections of the strategies. Each places "the orders to place" — the orders of one
// product that queued while the last section ran; an order alone is a batch of one — in one
// transaction: one conditional stock UPDATE for all of them, whose RowsAffected is checked, and
// one multi-row insert. They differ only in what guards the UPDATE: the version read (PlaceAt),
// a fencing token (PlaceFenced), the row lock (PlaceLocked) — or nothing (PlaceUnguarded: the
// naive strategy's lost update, and the unguarded strategies' trust in their lock alone, kept so
// that the checks can be seen to catch them).
//
// Every order gets its own answer: one over the product's limit, a repeat buyer, a reused
// Idempotency-Key or one that finds the stock spent fails alone, not the batch (allocate). An
// empty batch places nothing.

// Placed is the answer to one order of a batch: its order, or why it was not placed.
type Placed struct {
	Order Order
	Err   error
}

// PlaceAt is the optimistic critical section (hybrid, dblock): it places the orders only if the
// product is still at the version read (UPDATE ... WHERE version = ? AND stock >= total). It
// takes no lock of its own, so it stays correct when a lock in front of it was lost: a stale
// writer matches no row and gets ErrVersionConflict, having written nothing — read again and
// retry. The read may come from any earlier moment; only the version matters.
func (s *Store) PlaceAt(ctx context.Context, reqs []OrderRequest, read Product) ([]Placed, error) {
	return s.placeAt(ctx, reqs, read, true)
}

// PlaceAdmitted is PlaceAt for orders whose buyers admission has vouched for — none of them held
// an active order when it admitted them (hybrid's Redis buyer set) — so the batch skips the
// lookup of stored buyers and keys: one query fewer inside the lock. The unique keys on orders
// still decide: a conflict admission missed (a buyer set rebuilt late, a reused key) fails the
// insert, writes nothing, and comes back as ErrVersionConflict, so the caller's retry runs PlaceAt,
// which looks.
func (s *Store) PlaceAdmitted(ctx context.Context, reqs []OrderRequest, read Product) ([]Placed, error) {
	return s.placeAt(ctx, reqs, read, false)
}

func (s *Store) placeAt(ctx context.Context, reqs []OrderRequest, read Product, lookup bool) ([]Placed, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	a, err := s.allocate(s.db.WithContext(ctx), reqs, read, lookup)
	if err != nil || len(a.rows) == 0 {
		return a.out, err
	}
	err = s.withTx(ctx, s.db, func(tx *gorm.DB) error {
		q := tx.Model(&productRow{}).Where("sku = ? AND version = ? AND stock >= ?", read.SKU, read.Version, a.total)
		update := sale(a.total, Token{})
		if planted.On(planted.BlindWrite) {
			q = tx.Model(&productRow{}).Where("sku = ?", read.SKU)
			update["stock"] = read.Stock - a.total
		}
		res := q.Updates(update)
		if res.Error != nil {
			return res.Error
		}
		freezepoint.At(freezepoint.Updated)
		if res.RowsAffected != 1 {
			return fmt.Errorf("product %s at version %d: %w", read.SKU, read.Version, ErrVersionConflict)
		}
		return tx.Create(&a.rows).Error
	})
	return a.settle(read, err)
}

// PlaceFenced is the critical section of the lock services (etcd, ZooKeeper): the orders are
// placed only if no later lock holder has written (the fence of the token's kind <= token, and
// the version read), and the token becomes that fence. A holder whose lease or session expired
// while it was paused carries an older token than its successor and gets a *FenceError, having
// written nothing; a product that moved under the batch some other way answers
// ErrVersionConflict: read again and retry. beforeWrite runs between the read and the write (the
// strategies' fault hooks); an error from it writes nothing.
func (s *Store) PlaceFenced(ctx context.Context, reqs []OrderRequest, token Token, beforeWrite func(context.Context) error) ([]Placed, error) {
	read, a, write, err := s.readAndAllocate(ctx, reqs)
	if !write {
		return a.out, err
	}
	if err := beforeWrite(ctx); err != nil {
		return nil, err
	}
	err = s.withTx(ctx, s.db, func(tx *gorm.DB) error {
		q := tx.Model(&productRow{}).Where("sku = ? AND version = ? AND "+string(token.Fence)+" <= ?", read.SKU, read.Version, token.Value)
		if planted.On(planted.NoFence) {
			q = tx.Model(&productRow{}).Where("sku = ? AND version = ?", read.SKU, read.Version)
		}
		res := q.Updates(sale(a.total, token))
		if res.Error != nil {
			return res.Error
		}
		freezepoint.At(freezepoint.Updated)
		if res.RowsAffected != 1 && planted.On(planted.NoFence) {
			return fmt.Errorf("product %s changed under the batch: %w", read.SKU, ErrVersionConflict)
		}
		if res.RowsAffected != 1 {
			return fencedMiss(tx, read.SKU, token)
		}
		return tx.Create(&a.rows).Error
	})
	return a.settle(read, err)
}

// fencedMiss is the answer of a fenced write of sku that matched no row: *FenceError when a later
// holder wrote, ErrVersionConflict when the product moved some other way.
func fencedMiss(tx *gorm.DB, sku string, token Token) error {
	var now productRow
	if err := tx.Where("sku = ?", sku).Take(&now).Error; err != nil {
		return err
	}
	if last := now.fence(token.Fence); last > token.Value {
		return &FenceError{SKU: sku, Token: token, Fence: last}
	}
	return fmt.Errorf("product %s changed under the batch: %w", sku, ErrVersionConflict)
}

// ResetFence sets sku's fence of one kind back to 0 if it is still at observed. The lock
// services' strategies call it when the fence is ahead of the service's own current sequence —
// which no legitimate token can be, so the cluster was replaced and its sequence started again.
func (s *Store) ResetFence(ctx context.Context, sku string, fence Fence, observed int64) error {
	err := s.db.WithContext(ctx).Model(&productRow{}).Where("sku = ? AND "+string(fence)+" = ?", sku, observed).Update(string(fence), 0).Error
	if err := classify(err); err != nil {
		return fmt.Errorf("reset fence of %s: %w", sku, err)
	}
	return nil
}

// RowWait is what a transaction that takes the product row does when another transaction holds
// it.
type RowWait int

const (
	// NoWait does not wait (SELECT ... FOR UPDATE NOWAIT): a row another transaction holds
	// answers ErrBusy at once (MySQL 8: error 3572; MariaDB: 1205, its lock wait at zero), and
	// the connection goes back to its pool.
	NoWait RowWait = iota
	// WaitForRow waits in the row's lock queue (SELECT ... FOR UPDATE), holding its connection,
	// for as long as its pool's lock wait allows: then ErrBusy.
	WaitForRow
)

// ParseRowWait reads a RowWait by its name (String): nowait or wait.
func ParseRowWait(s string) (RowWait, error) {
	for _, w := range []RowWait{NoWait, WaitForRow} {
		if s == w.String() {
			return w, nil
		}
	}
	return 0, fmt.Errorf("row lock %q: want nowait or wait", s)
}

// String names w as the service's setting does (SECKILL_ROW_LOCK): nowait or wait.
func (w RowWait) String() string {
	if w == WaitForRow {
		return "wait"
	}
	return "nowait"
}

// PlaceLocked is the pessimistic critical section: one transaction takes the product row
// (SELECT ... FOR UPDATE, NOWAIT unless wait is WaitForRow), decides every order against it,
// decrements once and inserts all the rows; under the row lock nobody else can sell, so the
// buyers read here stay true until the commit (the unique keys back that up).
//
// NoWait answers ErrBusy at once when another transaction has the row, having written nothing
// and holding no connection: the answer of «Locks in practice» (docs/sources.md) to hundreds of buyers parking connections
// behind one row until the pool runs dry, and the caller's to retry. It runs on the store's main
// pool, like every transaction that never waits for a lock. WaitForRow waits in the row's lock
// queue for at most Options.LockWait (then ErrBusy, nothing written), on a small pool of its
// own, whose sessions carry that lock wait. Waiting is safe here too — the strategy's batcher
// lets at most one section per product and instance wait, so connections cannot pile up — and
// the queue hands the row to the next section the moment the holder commits, where retried
// NOWAITs leave it idle between tries and take it more often, for smaller batches, at more CPU
// per order. The load tool runs the two side by side on MySQL (rows pessimistic and
// pessimistic (wait)). On SQLite, which has no row locks, both take the database's single write
// lock without waiting (BEGIN IMMEDIATE, busy_timeout 0), so wait makes no difference there:
// the caller decides whether to try again.
//
// The orders come from take, called once the row is held, so that the orders that arrived while
// the section waited are placed by it too; the answers are for take's orders, in order. take is
// not called when the row could not be had, and may be called again on a retry (it must return
// the same orders then).
func (s *Store) PlaceLocked(ctx context.Context, sku string, wait RowWait, take func() []OrderRequest) ([]Placed, error) {
	return s.placeLocked(ctx, s.lockPool(wait), rowLock(wait), sku, take)
}

// lockPool is the pool a transaction that takes product rows with wait runs on: NOWAIT on MySQL
// holds no connection while it waits, so the main pool; a waiting one, the small queue pool.
func (s *Store) lockPool(wait RowWait) *gorm.DB {
	if wait == NoWait && s.dialect == MySQL {
		return s.db
	}
	return s.queue
}

// rowLock is the locking read of wait: FOR UPDATE, NOWAIT or not.
func rowLock(wait RowWait) clause.Locking {
	lock := clause.Locking{Strength: clause.LockingStrengthUpdate}
	if wait == NoWait {
		lock.Options = clause.LockingOptionsNoWait
	}
	if planted.On(planted.NowaitAsWait) {
		lock.Options = ""
	}
	return lock
}

// placeLocked is PlaceLocked's section on pool db, the row taken with lock (FOR UPDATE, or FOR
// UPDATE NOWAIT). The lab runs it on the main pool whichever the lock, as the sources do
// (PlaceOneForUpdate).
func (s *Store) placeLocked(ctx context.Context, db *gorm.DB, lock clause.Locking, sku string, take func() []OrderRequest) ([]Placed, error) {
	var (
		a    allocation
		read Product
	)
	err := s.withTx(ctx, db, func(tx *gorm.DB) error {
		q := tx.Where("sku = ?", sku)
		if s.dialect == MySQL {
			// On SQLite the transaction already holds the database's write lock (BEGIN IMMEDIATE).
			q = q.Clauses(lock)
		}
		var row productRow
		if err := q.Take(&row).Error; err != nil {
			return err
		}
		read = row.product()
		var err error
		if a, err = s.allocate(tx, take(), read, true); err != nil || len(a.rows) == 0 {
			return err
		}
		res := tx.Model(&productRow{}).Where("sku = ? AND stock >= ?", read.SKU, a.total).Updates(sale(a.total, Token{}))
		if res.Error != nil {
			return res.Error
		}
		freezepoint.At(freezepoint.Updated)
		if res.RowsAffected != 1 {
			return fmt.Errorf("product %s changed under its row lock: %w", read.SKU, ErrVersionConflict)
		}
		return tx.Create(&a.rows).Error
	})
	return a.settle(read, err)
}

// PlaceUnguarded is deliberately wrong, for the unsafe strategies only: it reads the stock,
// decides the orders against it, runs beforeWrite (naive: a pause, as network and application
// latency would; the unguarded strategies: their lock is held, and nothing is checked), then
// writes the stock it computed from its read. Concurrent sections — no lock, or a lock that two
// holders believe they hold — all read the same stock, all sell it, and each write overwrites
// the others' decrements: the lost update that oversells a flash sale. It is the one stock write
// in the project that is not conditional, and it exists so that the tests, the lab and the load
// tool can show that their checks catch it. An error from beforeWrite writes nothing.
func (s *Store) PlaceUnguarded(ctx context.Context, reqs []OrderRequest, beforeWrite func(context.Context) error) ([]Placed, error) {
	read, a, write, err := s.readAndAllocate(ctx, reqs)
	if !write {
		return a.out, err
	}
	if err := beforeWrite(ctx); err != nil {
		return nil, err
	}
	err = s.withTx(ctx, s.db, func(tx *gorm.DB) error {
		err := tx.Model(&productRow{}).Where("sku = ?", read.SKU).Updates(map[string]any{
			"stock":      read.Stock - a.total,
			"version":    gorm.Expr("version + 1"),
			"updated_at": time.Now().UTC(),
		}).Error
		if err != nil {
			return err
		}
		return tx.Create(&a.rows).Error
	})
	return a.settle(read, err)
}

// SoldOut answers the orders take returns, without a lock, when sku's stock is at zero: as a
// section would (allocate: the product's rules, repeat buyers and keys, then sold out), from a
// plain read of the row. While units are left ok is false and take is not called: the section
// decides. The buyers who come after the last unit — most of a flash sale's requests — then
// never queue for a lock or a row, which on a Galera cluster would be certification conflicts
// answered busy.
func (s *Store) SoldOut(ctx context.Context, sku string, take func() []OrderRequest) (answers []Placed, ok bool, err error) {
	read, err := s.Product(ctx, sku)
	if err != nil || read.Stock > 0 {
		return nil, false, err
	}
	a, err := s.allocate(s.db.WithContext(ctx), take(), read, true)
	return a.out, err == nil, err
}

// readAndAllocate reads the product of reqs and decides the batch against it (allocate). write
// is false when there is nothing to write — no orders, none that fits, or an error — and the
// answers are then a.out and err.
func (s *Store) readAndAllocate(ctx context.Context, reqs []OrderRequest) (read Product, a allocation, write bool, err error) {
	if len(reqs) == 0 {
		return read, a, false, nil
	}
	if read, err = s.Product(ctx, reqs[0].SKU); err != nil {
		return read, a, false, err
	}
	a, err = s.allocate(s.db.WithContext(ctx), reqs, read, true)
	return read, a, err == nil && len(a.rows) > 0, err
}

// sale is what selling units writes to the product row: fewer units, a new version (so that any
// writer holding the old one fails), and, under a lock service, the writer's fencing token (the
// zero Token: the fences are left as they are).
func sale(units int64, token Token) map[string]any {
	update := map[string]any{
		"stock":      gorm.Expr("stock - ?", units),
		"version":    gorm.Expr("version + 1"),
		"updated_at": time.Now().UTC(),
	}
	if token.Fence != "" {
		update[string(token.Fence)] = token.Value
	}
	return update
}

// allocation is a batch decided against one read of the product: the answers of the orders that
// fail alone, and the rows of those to insert.
type allocation struct {
	out   []Placed
	rows  []orderRow
	at    []int // out index of each row
	total int64
	now   time.Time // of the decision
}

// allocate decides each order of a batch against read, in arrival order — the product's rules,
// in one place: outside the sale window, over the product's limit, a buyer who holds an active
// order (in the database or earlier in the batch), an Idempotency-Key already used (in the
// database or earlier in the batch), or not enough stock left fail alone; the rest take their
// units, pending until a payment deadline when the product has one. One query finds the active
// buyers and the keys already stored, so that no known conflict reaches the insert, where it
// would fail the whole batch — unless lookup is false (PlaceAdmitted). A product with a window or a payment timeout is decided by the
// database's clock (one more query), which also decides expiries. db is the store's pool or the
// transaction the batch runs in.
func (s *Store) allocate(db *gorm.DB, reqs []OrderRequest, read Product, lookup bool) (allocation, error) {
	a := allocation{out: make([]Placed, len(reqs)), now: time.Now().UTC().Truncate(time.Microsecond)}
	if read.Window != (Window{}) || read.PaymentTimeout > 0 {
		var err error
		if a.now, err = s.clock(db); err != nil {
			return a, err
		}
	}
	if err := read.Window.Check(read.SKU, a.now); err != nil {
		for i := range a.out {
			a.out[i].Err = err
		}
		return a, nil
	}
	users := make([]string, len(reqs))
	keyList := []string{}
	for i, r := range reqs {
		users[i] = r.UserID
		if r.IdempotencyKey != "" {
			keyList = append(keyList, r.IdempotencyKey)
		}
	}
	var existing []orderRow
	if lookup {
		q := db.Model(&orderRow{}).Where("sku = ? AND user_id IN ? AND "+active, read.SKU, users)
		if len(keyList) > 0 {
			q = q.Or("idempotency_key IN ?", keyList)
		}
		if err := classify(q.Select("sku", "user_id", "idempotency_key", "status").Find(&existing).Error); err != nil {
			return a, fmt.Errorf("batch buyers of %s: %w", read.SKU, err)
		}
	}
	bought := map[string]bool{}
	keys := map[string]bool{}
	for _, o := range existing {
		if o.SKU == read.SKU && o.Status.Active() {
			bought[o.UserID] = true
		}
		if o.IdempotencyKey != nil {
			keys[*o.IdempotencyKey] = true
		}
	}
	left := read.Stock
	for i, r := range reqs {
		switch {
		case r.Quantity > read.MaxPerOrder:
			a.out[i].Err = &InvalidError{Msg: fmt.Sprintf("quantity %d exceeds max_per_order %d of product %s", r.Quantity, read.MaxPerOrder, read.SKU)}
		case bought[r.UserID]:
			a.out[i].Err = fmt.Errorf("user %s, product %s: %w", r.UserID, r.SKU, ErrAlreadyPurchased)
		case r.IdempotencyKey != "" && keys[r.IdempotencyKey]:
			a.out[i].Err = fmt.Errorf("key %q already used: %w", r.IdempotencyKey, ErrDuplicateRequest)
		case int64(r.Quantity) > left:
			a.out[i].Err = &SoldOutError{SKU: read.SKU, Left: left, Asked: r.Quantity}
		default:
			bought[r.UserID] = true
			if r.IdempotencyKey != "" {
				keys[r.IdempotencyKey] = true
			}
			left -= int64(r.Quantity)
			a.total += int64(r.Quantity)
			a.rows = append(a.rows, newOrderRow(r, a.now, read.PaymentTimeout))
			a.at = append(a.at, i)
		}
	}
	return a, nil
}

// settle turns the batch transaction's outcome into the answers.
func (a allocation) settle(read Product, err error) ([]Placed, error) {
	if err != nil {
		var dup *errDuplicate
		if errors.As(err, &dup) {
			// A key or buyer of this batch was taken by a writer outside it between the check and
			// the insert: nothing was written; read again and retry.
			return nil, fmt.Errorf("batch of %d on %s: %w", len(a.rows), read.SKU, ErrVersionConflict)
		}
		return nil, fmt.Errorf("batch of %d on %s: %w", len(a.rows), read.SKU, err)
	}
	for j, i := range a.at {
		a.out[i].Order = a.rows[j].order(a.now)
	}
	return a.out, nil
}
