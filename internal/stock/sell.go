package stock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/flashsale/seckill/internal/freezepoint"
	"github.com/flashsale/seckill/internal/planted"
)

// The critical sections of the strategies. Each places a batch (the requests for the same
// products that queued while the last section ran) in one transaction: one conditional UPDATE
// per product, its RowsAffected checked, and one multi-row insert. Products go in SKU order, so
// crossed checkouts (A+B, B+A) never each hold a row the other waits for. What guards an UPDATE:
// the version read (PlaceAt), a fencing token (PlaceFenced), the row lock (PlaceLocked), or
// nothing (PlaceUnguarded, so the checks can be seen to catch the lost update). A refused
// request fails alone (decide), never the batch, never by half.

// Placed is the answer to one request of a batch: its checkout, or why it was not placed.
type Placed struct {
	Checkout Checkout
	Err      error
}

// PlaceAt is the optimistic critical section (hybrid, dblock): it writes only if every product
// is still at the version read (reads: one per product, any order, from any earlier moment).
// It takes no lock, so it stays correct when a lock in front of it was lost: a stale writer
// matches no row and gets ErrVersionConflict, having written nothing. Read again and retry.
func (s *Store) PlaceAt(ctx context.Context, reqs []CheckoutRequest, reads []Product) ([]Placed, error) {
	return s.placeAt(ctx, reqs, reads, true)
}

// PlaceAdmitted is PlaceAt for buyers admission vouched for (hybrid): one query fewer inside the
// lock, no lookup of stored buyers and keys. The unique keys still decide: a conflict admission
// missed fails the insert with ErrVersionConflict, and the retry runs PlaceAt, which looks.
func (s *Store) PlaceAdmitted(ctx context.Context, reqs []CheckoutRequest, reads []Product) ([]Placed, error) {
	return s.placeAt(ctx, reqs, reads, false)
}

func (s *Store) placeAt(ctx context.Context, reqs []CheckoutRequest, reads []Product, lookup bool) ([]Placed, error) {
	b, err := s.decide(s.db.WithContext(ctx), reqs, reads, lookup)
	return s.write(ctx, b, err, func(tx *gorm.DB, read Product, units int64) error {
		q := tx.Model(&productRow{}).Where("sku = ? AND version = ? AND stock >= ?", read.SKU, read.Version, units)
		update := sale(units, Token{})
		if planted.On(planted.BlindWrite) {
			q = tx.Model(&productRow{}).Where("sku = ?", read.SKU)
			update["stock"] = read.Stock - units
		}
		return changedOne(q.Updates(update), "products/"+read.SKU)
	})
}

// PlaceFenced is the section of the lock services (etcd, ZooKeeper): it writes only if no later
// holder has (fence <= token, at the version read), and each token becomes its product's fence.
// A holder paused past its lease has an older token than its successor: *FenceError, nothing
// written. A product that moved some other way answers ErrVersionConflict: read again, retry.
// beforeWrite (the fault hooks) runs between the reads and the write; its error writes nothing.
func (s *Store) PlaceFenced(ctx context.Context, reqs []CheckoutRequest, tokens map[string]Token, beforeWrite func(context.Context) error) ([]Placed, error) {
	b, err := s.readAndDecide(ctx, reqs, beforeWrite)
	return s.write(ctx, b, err, func(tx *gorm.DB, read Product, units int64) error {
		token := tokens[read.SKU]
		q := tx.Model(&productRow{}).Where("sku = ? AND version = ? AND "+string(token.Fence)+" <= ?", read.SKU, read.Version, token.Value)
		if planted.On(planted.NoFence) {
			q = tx.Model(&productRow{}).Where("sku = ? AND version = ?", read.SKU, read.Version)
		}
		res := q.Updates(sale(units, token))
		if res.Error == nil && res.RowsAffected != 1 && !planted.On(planted.NoFence) {
			return fencedMiss(tx, read.SKU, token)
		}
		return changedOne(res, "products/"+read.SKU)
	})
}

// fencedMiss answers a fenced write that matched no row: *FenceError if a later holder wrote.
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

// ResetFence sets sku's fence back to 0 if still at observed: a fence ahead of the lock service's
// own sequence, which no real token can be, means the cluster was replaced and started again.
func (s *Store) ResetFence(ctx context.Context, sku string, fence Fence, observed int64) error {
	err := s.db.WithContext(ctx).Model(&productRow{}).Where("sku = ? AND "+string(fence)+" = ?", sku, observed).Update(string(fence), 0).Error
	if err := classify(err); err != nil {
		return fmt.Errorf("reset fence of %s: %w", sku, err)
	}
	return nil
}

// RowWait is what a transaction that takes a product row does when another one holds it.
type RowWait int

const (
	// NoWait (FOR UPDATE NOWAIT): a held row answers ErrBusy at once, the connection freed.
	NoWait RowWait = iota
	// WaitForRow waits in the row's lock queue, holding its connection, up to the lock wait.
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

// PlaceLocked is the pessimistic critical section: one transaction takes the rows of skus in
// SKU order (SELECT ... FOR UPDATE), decides every request and writes. Under the row locks
// nobody else can sell, so what it read stays true until the commit.
//
// NoWait answers ErrBusy at once and holds no connection while the row is taken: hundreds of
// buyers cannot park connections behind one row until the pool runs dry («Locks in practice»,
// docs/sources.md). WaitForRow waits in the row's queue (at most Options.LockWait) on a small
// pool of its own, safe because the batcher lets one section per product and instance wait; the
// row passes on at its holder's commit, not idle between retries. SQLite takes its one write
// lock without waiting (BEGIN IMMEDIATE, busy_timeout 0).
//
// take gives the requests once the rows are held, so the section also places those that came
// while it waited; the answers are for them, in order. take is not called when a row could not
// be had, and must return the same requests when called again on a retry.
func (s *Store) PlaceLocked(ctx context.Context, skus []string, wait RowWait, take func() []CheckoutRequest) ([]Placed, error) {
	return s.placeLocked(ctx, s.lockPool(wait), rowLock(wait), skus, take)
}

// lockPool is the pool of a section that takes rows with wait: NOWAIT on MySQL waits holding no
// connection, so the main pool; a waiting one, the small queue pool.
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

// placeLocked is PlaceLocked on pool db (the lab's PlaceOneForUpdate: the main pool).
func (s *Store) placeLocked(ctx context.Context, db *gorm.DB, lock clause.Locking, skus []string, take func() []CheckoutRequest) ([]Placed, error) {
	var b batch
	err := s.withTx(ctx, db, func(tx *gorm.DB) error {
		reads := make([]Product, len(skus))
		for i, sku := range skus {
			q := tx.Where("sku = ?", sku)
			if s.dialect == MySQL {
				// On SQLite the transaction already holds the database's write lock (BEGIN IMMEDIATE).
				q = q.Clauses(lock)
			}
			var row productRow
			if err := classify(q.Take(&row).Error); err != nil {
				return lineError(sku, err)
			}
			reads[i] = row.product()
		}
		var err error
		if b, err = s.decide(tx, take(), reads, true); err != nil || len(b.rows) == 0 {
			return err
		}
		return b.insert(tx, func(tx *gorm.DB, read Product, units int64) error {
			res := tx.Model(&productRow{}).Where("sku = ? AND stock >= ?", read.SKU, units).Updates(sale(units, Token{}))
			return changedOne(res, "products/"+read.SKU)
		})
	})
	return b.settle(err)
}

// PlaceUnguarded is deliberately wrong, for the unsafe strategies only: it reads, decides, runs
// beforeWrite (naive: a pause; unguarded: a lock nothing checks), then writes the stock computed
// from its read. Concurrent sections sell the same stock and overwrite each other: the lost
// update that oversells. It is the one unconditional stock write, kept so that the tests, the
// lab and the load tool show their checks catch it. beforeWrite's error writes nothing.
func (s *Store) PlaceUnguarded(ctx context.Context, reqs []CheckoutRequest, beforeWrite func(context.Context) error) ([]Placed, error) {
	b, err := s.readAndDecide(ctx, reqs, beforeWrite)
	return s.write(ctx, b, err, func(tx *gorm.DB, read Product, units int64) error {
		update := sale(units, Token{})
		update["stock"] = read.Stock - units
		return tx.Model(&productRow{}).Where("sku = ?", read.SKU).Updates(update).Error
	})
}

// SoldOut decides take's requests from plain reads, without a lock, when a product of skus is
// at zero stock; else ok is false and take is not called. Most buyers come after the last unit:
// they never queue for a lock or a row (on Galera: certification conflicts answered busy).
func (s *Store) SoldOut(ctx context.Context, skus []string, take func() []CheckoutRequest) (answers []Placed, ok bool, err error) {
	reads, err := s.Reads(ctx, skus)
	if err != nil || !slices.ContainsFunc(reads, func(p Product) bool { return p.Stock <= 0 }) {
		return nil, false, err
	}
	b, err := s.decide(s.db.WithContext(ctx), take(), reads, true)
	return b.out, err == nil, err
}

// Reads reads the products of skus, in their order: the reads a section decides against. A
// missing product answers a *CheckoutError naming it.
func (s *Store) Reads(ctx context.Context, skus []string) ([]Product, error) {
	reads := make([]Product, len(skus))
	for i, sku := range skus {
		p, err := s.Product(ctx, sku)
		if err != nil {
			return nil, lineError(sku, err)
		}
		reads[i] = p
	}
	return reads, nil
}

// readAndDecide reads every product of the batch, decides its requests against those reads and
// runs beforeWrite when there is something to write.
func (s *Store) readAndDecide(ctx context.Context, reqs []CheckoutRequest, beforeWrite func(context.Context) error) (batch, error) {
	if len(reqs) == 0 {
		return batch{}, nil
	}
	reads, err := s.Reads(ctx, reqs[0].SKUs())
	if err != nil {
		return batch{}, err
	}
	b, err := s.decide(s.db.WithContext(ctx), reqs, reads, true)
	if err != nil || len(b.rows) == 0 {
		return b, err
	}
	return b, beforeWrite(ctx)
}

// sale is what selling units writes to the product row: fewer units, a new version (so that any
// writer holding the old one fails), and under a lock service the writer's fencing token.
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

// batch is a batch of requests for the same products, decided against one read of each.
type batch struct {
	reads  []Product // the batch's products, in SKU order
	units  []int64   // the units the batch sells of each product (by reads' index)
	rows   []orderRow
	placed [][]int // by request: the indices of its rows, none when it was refused
	out    []Placed
	now    time.Time
}

// decide applies the products' rules, in one place, to each request of reqs (all for the same
// products) in arrival order, against reads (one per product, any order). A line refused (sale
// window, limit, buyer with an active order, used key, too little stock) refuses its request
// (Refusal). The others take their units, pending until their shortest payment timeout or
// confirmed. Unless lookup is false, one query (stored) finds the known conflicts, so none fails
// the whole batch at the insert. Windows and deadlines go by the database's clock.
func (s *Store) decide(db *gorm.DB, reqs []CheckoutRequest, reads []Product, lookup bool) (batch, error) {
	b := batch{out: make([]Placed, len(reqs)), placed: make([][]int, len(reqs)), now: time.Now().UTC().Truncate(time.Microsecond)}
	if len(reqs) == 0 {
		return b, nil
	}
	skus := reqs[0].SKUs()
	var err error
	if b.reads, err = readsOf(skus, reads); err != nil {
		return b, err
	}
	b.units = make([]int64, len(skus))
	var timeout time.Duration
	clock := false
	for _, p := range b.reads {
		clock = clock || p.Window != (Window{}) || p.PaymentTimeout > 0
		if p.PaymentTimeout > 0 && (timeout == 0 || p.PaymentTimeout < timeout) {
			timeout = p.PaymentTimeout
		}
	}
	if clock {
		if b.now, err = s.clock(db); err != nil {
			return b, err
		}
	}
	bought, keys, err := stored(db, reqs, skus, lookup)
	if err != nil {
		return b, err
	}
	for i, req := range reqs {
		lines := req.lines()
		if !slices.Equal(req.SKUs(), skus) {
			return b, fmt.Errorf("request %d of a batch buys other products than the first", i)
		}
		if req.IdempotencyKey != "" && keys[req.IdempotencyKey] {
			b.out[i].Err = fmt.Errorf("key %q already used: %w", req.IdempotencyKey, ErrDuplicateRequest)
			continue
		}
		refused := make([]error, len(lines))
		for j, l := range lines {
			p, left := b.reads[j], b.reads[j].Stock-b.units[j]
			switch err := p.Window.Check(p.SKU, b.now); {
			case err != nil:
				refused[j] = err
			case l.Quantity < 1 || l.Quantity > p.MaxPerOrder:
				refused[j] = &InvalidError{Msg: fmt.Sprintf("quantity %d of product %s: want 1 to max_per_order %d", l.Quantity, p.SKU, p.MaxPerOrder)}
			case bought[[2]string{req.UserID, p.SKU}]:
				refused[j] = fmt.Errorf("user %s, product %s: %w", req.UserID, p.SKU, ErrAlreadyPurchased)
			case int64(l.Quantity) > left:
				refused[j] = &SoldOutError{SKU: p.SKU, Left: left, Asked: l.Quantity}
			}
		}
		if b.out[i].Err = Refusal(lines, refused); b.out[i].Err != nil {
			continue
		}
		var id *string
		if !req.Order {
			id = &req.CheckoutID
			if *id == "" {
				*id = ulid.Make().String()
			}
		}
		for j, l := range lines {
			b.units[j] += int64(l.Quantity)
			bought[[2]string{req.UserID, l.SKU}] = true
			row := newOrderRow(l, b.now, timeout)
			row.CheckoutID = id
			if j == 0 {
				// The key goes on the first line only: its unique index takes one row per key,
				// and a replay finds the request through that line.
				row.RequestHash = req.Fingerprint()
				if req.IdempotencyKey != "" {
					row.IdempotencyKey = &req.IdempotencyKey
				}
			}
			b.placed[i] = append(b.placed[i], len(b.rows))
			b.rows = append(b.rows, row)
		}
		if req.IdempotencyKey != "" {
			keys[req.IdempotencyKey] = true
		}
	}
	return b, nil
}

// stored finds, in one query, the buyers of reqs holding an active order of a product of skus
// (buyer and SKU), and the keys of reqs already used — none when lookup is false.
func stored(db *gorm.DB, reqs []CheckoutRequest, skus []string, lookup bool) (bought map[[2]string]bool, keys map[string]bool, err error) {
	bought, keys = map[[2]string]bool{}, map[string]bool{}
	if !lookup {
		return bought, keys, nil
	}
	users, keyList := make([]string, len(reqs)), []string{}
	for i, r := range reqs {
		users[i] = r.UserID
		if r.IdempotencyKey != "" {
			keyList = append(keyList, r.IdempotencyKey)
		}
	}
	var existing []orderRow
	q := db.Model(&orderRow{}).Where("user_id IN ? AND sku IN ? AND "+active, users, skus)
	if len(keyList) > 0 {
		q = q.Or("idempotency_key IN ?", keyList)
	}
	if err := classify(q.Select("sku", "user_id", "idempotency_key", "status").Find(&existing).Error); err != nil {
		return nil, nil, fmt.Errorf("batch buyers: %w", err)
	}
	for _, o := range existing {
		if o.Status.Active() && slices.Contains(skus, o.SKU) {
			bought[[2]string{o.UserID, o.SKU}] = true
		}
		if o.IdempotencyKey != nil {
			keys[*o.IdempotencyKey] = true
		}
	}
	return bought, keys, nil
}

// readsOf puts reads in the order of skus.
func readsOf(skus []string, reads []Product) ([]Product, error) {
	out := make([]Product, len(skus))
	for i, sku := range skus {
		j := slices.IndexFunc(reads, func(p Product) bool { return p.SKU == sku })
		if j < 0 {
			return nil, &CheckoutError{SKUs: []string{sku}, Err: fmt.Errorf("product %s not read: %w", sku, ErrNotFound)}
		}
		out[i] = reads[j]
	}
	return out, nil
}

// write runs sell for every product of b, inserts every row, in one transaction, and settles:
// nothing when deciding b failed with err or left nothing to write.
func (s *Store) write(ctx context.Context, b batch, err error, sell func(tx *gorm.DB, read Product, units int64) error) ([]Placed, error) {
	if err != nil || len(b.rows) == 0 {
		return b.out, err
	}
	if planted.On(planted.PartialCheckout) {
		for _, row := range b.rows {
			j := slices.IndexFunc(b.reads, func(p Product) bool { return p.SKU == row.SKU })
			err := s.withTx(ctx, s.db, func(tx *gorm.DB) error {
				if err := sell(tx, b.reads[j], int64(row.Quantity)); err != nil {
					return err
				}
				return tx.Create(&row).Error
			})
			if err != nil {
				return b.settle(err)
			}
		}
		return b.settle(nil)
	}
	return b.settle(s.withTx(ctx, s.db, func(tx *gorm.DB) error { return b.insert(tx, sell) }))
}

// insert runs sell for every product of the batch in tx, then inserts every row.
func (b batch) insert(tx *gorm.DB, sell func(tx *gorm.DB, read Product, units int64) error) error {
	for j, units := range b.units {
		if err := sell(tx, b.reads[j], units); err != nil {
			return err
		}
	}
	freezepoint.At(freezepoint.Updated)
	return tx.Create(&b.rows).Error
}

// settle is the batch's answers once its write ended with err. A key or buyer taken by another
// writer between the decision and the insert wrote nothing: ErrVersionConflict, read again.
func (b batch) settle(err error) ([]Placed, error) {
	if err != nil {
		if isDuplicate(err) {
			err = fmt.Errorf("batch of %d rows: %w", len(b.rows), ErrVersionConflict)
		}
		return nil, err
	}
	for i, at := range b.placed {
		if len(at) == 0 {
			continue
		}
		rows := make([]orderRow, len(at))
		for k, r := range at {
			rows[k] = b.rows[r]
		}
		b.out[i].Checkout = checkoutOf(rows, b.now)
	}
	return b.out, nil
}

// lineError names the line an error is about, when it is the product's own (not found).
func lineError(sku string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return &CheckoutError{SKUs: []string{sku}, Err: err}
	}
	return err
}

// Order is the answer to a request of one line (OrderOf): its order, or why not
// (CheckoutRequest.Answer).
func (p Placed) Order() (Order, error) {
	if err := (CheckoutRequest{Order: true}).Answer(p.Err); err != nil {
		return Order{}, err
	}
	return p.Checkout.Lines[0], nil
}
