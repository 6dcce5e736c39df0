package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// errSoldOut ends a baseline buyer who found no stock.
var errSoldOut = errors.New("sold out")

// baseline is the yardstick of issue 6: the classic per-order transaction — SELECT ... FOR UPDATE,
// UPDATE, INSERT, COMMIT — run straight against the database by workers connections, no HTTP,
// no lock service. Every strategy's orders/s is reported as a ratio to it, measured in the same
// run on the same machine. It sells one unit to each of buyers users of sku (a product the caller
// created through the API) and returns the orders it placed.
func baseline(ctx context.Context, db *sql.DB, sku string, buyers, workers int) (orders []ackedOrder, selling time.Duration, err error) {
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	// Give the connections back afterwards: left idle, they would keep the service instances
	// that run next from theirs (MariaDB allows 151 by default) and show up as 503s.
	defer db.SetMaxIdleConns(2)
	users := make(chan int)
	go func() {
		defer close(users)
		for i := range buyers {
			select {
			case users <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		first    error
		lastSale time.Time
	)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range users {
				user := fmt.Sprintf("%s-b%06d", sku, i)
				id, err := placeForUpdate(ctx, db, sku, user)
				mu.Lock()
				switch {
				case err == nil:
					orders = append(orders, ackedOrder{OrderID: id, UserID: user})
					lastSale = time.Now()
				case !errors.Is(err, errSoldOut) && first == nil:
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return orders, lastSale.Sub(start), first
}

// baselineReport runs the baseline on a fresh product and verifies it like any sale.
func (rr roundRunner) baselineReport(ctx context.Context, db *sql.DB) (report, error) {
	o := rr.opts
	sku := o.sku + "-baseline"
	if err := putProduct(ctx, rr.client, rr.targets[0], o.token, sku, o.stock, 0); err != nil {
		return report{}, err
	}
	orders, selling, err := baseline(ctx, db, sku, o.users, o.concurrency)
	if err != nil {
		return report{}, fmt.Errorf("baseline: %w", err)
	}
	r := report{Strategy: "baseline", Family: "SQL: SELECT ... FOR UPDATE, UPDATE, INSERT per order (no HTTP)", SKU: sku,
		Requests: o.users, Attempts: o.users, Outcomes: map[string]int{outcomeOK: len(orders), outcomeSoldOut: o.users - len(orders)}}
	if selling > 0 {
		r.OrdersPerSecond = float64(len(orders)) / selling.Seconds()
	}
	if r.Verdict, err = rr.verifier.verify(ctx, sku, orders); err != nil {
		return report{}, fmt.Errorf("verify baseline: %w", err)
	}
	r.judge()
	fmt.Fprintf(rr.log, "loadtest: baseline: %d orders at %.0f orders/s; %s\n", len(orders), r.OrdersPerSecond, r.verdictText())
	return r, nil
}

// placeForUpdate is one order of the baseline: the row lock is held across three round trips.
func placeForUpdate(ctx context.Context, db *sql.DB, sku, user string) (string, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback() }()
	var stock int64
	if err := tx.QueryRowContext(ctx, "SELECT stock FROM products WHERE sku = ? FOR UPDATE", sku).Scan(&stock); err != nil {
		return "", err
	}
	if stock < 1 {
		return "", errSoldOut
	}
	if _, err := tx.ExecContext(ctx, "UPDATE products SET stock = stock - 1, version = version + 1 WHERE sku = ?", sku); err != nil {
		return "", err
	}
	id := ulid.Make().String()
	hash := sha256.Sum256([]byte(sku + "/" + user))
	if _, err := tx.ExecContext(ctx,
		"INSERT INTO orders (order_id, sku, user_id, quantity, strategy, request_hash, created_at) VALUES (?, ?, ?, 1, 'baseline', ?, ?)",
		id, sku, user, hex.EncodeToString(hash[:]), time.Now().UTC()); err != nil {
		return "", err
	}
	return id, tx.Commit()
}
