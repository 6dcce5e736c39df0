// Package verify holds a sale against its invariant, in the store itself — the tables the
// service writes, read-only — and through the HTTP API: the service's audit and stored orders
// are what is under test, held against the tool's own reading of the tables.
package verify

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	_ "github.com/glebarez/go-sqlite" // database/sql driver "sqlite", the service's own (pure Go)
	_ "github.com/go-sql-driver/mysql"

	"github.com/flashsale/seckill/contract"
)

// holds reports whether the counts of a say consistent, as README.md's "The invariant" defines
// it: no negative stock, every unit in stock or in an active order, one active order per buyer.
func holds(a contract.Audit) bool {
	return a.Stock >= 0 && a.Stock+a.OrderedQuantity == a.InitialStock && a.Orders == a.DistinctBuyers
}

// Order is what a 201 told the client, and — when the buyer did something with it
// (-cancel, -unpaid) — the state it must end in.
type Order struct {
	OrderID string `json:"order_id"`
	UserID  string `json:"user_id"`
	Status  string `json:"status"`
	SKU     string `json:"sku"`
	Want    string `json:"-"` // cancelled, expired or confirmed; "" for an order left as placed
}

// Verdict is what the verifier found after a sale.
type Verdict struct {
	Audit    contract.Audit  `json:"audit"`           // the service's GET /audit
	Store    *contract.Audit `json:"store,omitempty"` // the tool's own reading of the tables; nil when it cannot read them
	Oversold int64           `json:"oversold"`
	Problems []string        `json:"problems,omitempty"`
}

// OK reports whether the invariant held and every 201 was backed by its order.
func (v Verdict) OK() bool { return len(v.Problems) == 0 }

// stored is an order as the server's store holds it.
type stored struct{ user, status string }

// active reports whether an order in this state holds its units.
func active(status string) bool { return status == "pending" || status == "confirmed" }

// check is the invariant over an audit, the 201s the clients were given, and which of those
// orders the server's store holds (present: order id -> user and state there): no negative
// stock, every unit in stock or in one active order, one active order per buyer, every 201
// stored once for its buyer, the active ones exactly the active orders of the audit, and every
// order the buyers paid, cancelled or left unpaid in the state that must follow.
func check(a contract.Audit, acked []Order, present map[string]stored) Verdict {
	v := Verdict{Audit: a, Oversold: max(0, a.OrderedQuantity-a.InitialStock)}
	if a.Stock < 0 {
		v.Problems = append(v.Problems, fmt.Sprintf("stock is negative: %d", a.Stock))
	}
	if a.Stock+a.OrderedQuantity != a.InitialStock {
		v.Problems = append(v.Problems, fmt.Sprintf("stock %d + ordered %d != initial %d", a.Stock, a.OrderedQuantity, a.InitialStock))
	}
	if v.Oversold > 0 {
		v.Problems = append(v.Problems, fmt.Sprintf("oversold by %d", v.Oversold))
	}
	if a.Orders != a.DistinctBuyers {
		v.Problems = append(v.Problems, fmt.Sprintf("%d orders for %d buyers: a user holds two", a.Orders, a.DistinctBuyers))
	}
	if a.Queued != nil && *a.Queued != 0 {
		// Checked once every 202 ended: an order still counted queued is one no client will see end.
		v.Problems = append(v.Problems, fmt.Sprintf("%d orders still queued after the sale", *a.Queued))
	}
	seen := map[string]bool{}
	activeAcked := int64(0)
	for _, o := range acked {
		if seen[o.OrderID] {
			v.Problems = append(v.Problems, "order "+o.OrderID+" acknowledged twice")
		}
		seen[o.OrderID] = true
		got, ok := present[o.OrderID]
		switch {
		case !ok:
			v.Problems = append(v.Problems, "order "+o.OrderID+" was acknowledged but is not stored")
			continue
		case got.user != o.UserID:
			v.Problems = append(v.Problems, fmt.Sprintf("order %s was acknowledged to %s but is stored for %s", o.OrderID, o.UserID, got.user))
		case o.Want != "" && got.status != o.Want:
			v.Problems = append(v.Problems, fmt.Sprintf("order %s should be %s but is %s", o.OrderID, o.Want, got.status))
		}
		if active(got.status) {
			activeAcked++
		}
	}
	if activeAcked != a.Orders {
		v.Problems = append(v.Problems, fmt.Sprintf("%d acknowledged orders active, %d active in the store", activeAcked, a.Orders))
	}
	return v
}

// Verifier checks a sale in the store itself — the tables the service writes — and through the
// HTTP API. The service's audit and stored orders are what is under test: they are held against
// the tool's own reading of the tables, never taken as the Verdict when the tables can be read.
type Verifier struct {
	Client *http.Client
	Base   string // any one instance
	Token  string
	Store  *Store // nil when the tool cannot read the store (-target without -mysql)
	// BuyerToken, when the service authenticates buyers, is the bearer token of a buyer: an
	// order is read as its buyer, since the admin token does not read orders there.
	BuyerToken func(user string) string
}

// Verify checks the invariant on the tables, cross-checks the service's audit and stored orders
// against them, and checks the audit's own arithmetic. Without a store it checks the service's
// audit and stored orders alone.
func (vf Verifier) Verify(ctx context.Context, sku string, acked []Order) (Verdict, error) {
	var served contract.Audit
	if err := vf.Get(ctx, "/api/v1/products/"+sku+"/audit", &served); err != nil {
		return Verdict{}, err
	}
	// The tables are read right after the audit, before the orders are fetched one by one, so
	// that the two readings are as close in time as the tool can make them.
	var (
		own       contract.Audit
		ownOrders map[string]stored
	)
	if vf.Store != nil {
		var err error
		if own, ownOrders, err = vf.Store.read(ctx, sku); err != nil {
			return Verdict{}, err
		}
	}
	present, err := vf.storedOrders(ctx, acked)
	if err != nil {
		return Verdict{}, err
	}
	viaAPI := check(served, acked, present)
	if served.Consistent != holds(served) {
		viaAPI.Problems = append(viaAPI.Problems, "the server's audit computes consistent wrongly")
	}
	if vf.Store == nil {
		return viaAPI, nil
	}
	v := check(own, acked, ownOrders)
	v.Audit, v.Store = served, &own
	v.Problems = append(v.Problems, disagreements(own, served)...)
	for _, p := range viaAPI.Problems {
		if !slices.Contains(v.Problems, p) {
			v.Problems = append(v.Problems, "api: "+p)
		}
	}
	return v, nil
}

// disagreements are the differences between the tool's reading of the tables (own) and the
// service's audit of the same product: every one fails the Verdict, whichever side the invariant
// holds on, because an audit that says other than the tables cannot be trusted to catch an
// oversell.
func disagreements(own, served contract.Audit) []string {
	var out []string
	for _, f := range []struct {
		name          string
		tables, audit int64
	}{
		{"initial_stock", own.InitialStock, served.InitialStock},
		{"stock", own.Stock, served.Stock},
		{"ordered_quantity", own.OrderedQuantity, served.OrderedQuantity},
		{"orders", own.Orders, served.Orders},
		{"distinct_buyers", own.DistinctBuyers, served.DistinctBuyers},
		{"oversold", own.Oversold, served.Oversold},
	} {
		if f.tables != f.audit {
			out = append(out, fmt.Sprintf("the service's audit says %s %d, the tables %d", f.name, f.audit, f.tables))
		}
	}
	if served.Consistent != own.Consistent {
		out = append(out, fmt.Sprintf("the service's audit says consistent %t, the tables %t", served.Consistent, own.Consistent))
	}
	return out
}

// storedOrders asks the API for every acknowledged order.
func (vf Verifier) storedOrders(ctx context.Context, acked []Order) (map[string]stored, error) {
	present := map[string]stored{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, len(acked))
	sem := make(chan struct{}, 16)
	for _, o := range acked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var got Order
			token := vf.Token
			if vf.BuyerToken != nil {
				token = vf.BuyerToken(o.UserID)
			}
			err := vf.get(ctx, "/api/v1/orders/"+o.OrderID, token, &got)
			if err != nil && !strings.Contains(err.Error(), "404") {
				errs <- err
				return
			}
			if err == nil {
				mu.Lock()
				present[got.OrderID] = stored{got.UserID, got.Status}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	return present, <-errs
}

// Get decodes the JSON answer of an admin GET of path on the instance into out; any status but
// 200 is an error.
func (vf Verifier) Get(ctx context.Context, path string, out any) error {
	return vf.get(ctx, path, vf.Token, out)
}

// get is Get with the bearer token given.
func (vf Verifier) get(ctx context.Context, path, token string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, vf.Base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := vf.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}

// Store reads the service's database as an outside check does: the tables of the contract
// (products and orders with their status, as migrations/ define them), straight, never through the service.
type Store struct {
	db    *sql.DB
	What  string // which store, for the log
	owned bool   // the reader opened db, and closes it; the -mysql pool is the run's
}

// MySQL reads the -mysql database; db is the run's pool, which the baseline shares.
func MySQL(db *sql.DB) *Store {
	return &Store{db: db, What: "the -mysql database"}
}

// Close closes what the reader opened; a nil reader has nothing open.
func (s *Store) Close() {
	if s != nil && s.owned {
		_ = s.db.Close()
	}
}

// OpenSQLite opens the embedded store of the processes the tool started — the SQLite file
// they named at start — read-only, since the tool must never change what it checks. The
// processes write it meanwhile: in WAL mode a reader does not block the writer, and a read that
// meets the writer's lock or a checkpoint waits for it (the busy timeout) instead of failing.
func OpenSQLite(ctx context.Context, path string) (*Store, error) {
	u := url.URL{Scheme: "file", Path: path, RawQuery: "mode=ro&_pragma=busy_timeout(5000)"}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return nil, fmt.Errorf("open the service's SQLite store %s: %w", path, err)
	}
	db.SetMaxOpenConns(2)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open the service's SQLite store %s: %w", path, err)
	}
	return &Store{db: db, What: "the SQLite file " + path + ", read-only", owned: true}, nil
}

// read is the invariant's numbers and every order of sku, from the tables, in one read-only
// transaction: one snapshot (InnoDB's repeatable read, SQLite's read transaction), so that the
// counts and the orders are of the same moment. It is the database's truth: a pending order past
// its deadline is still pending (active) there until the service expires it, though the API
// already reads it as expired. The tool verifies once no order is pending.
func (s *Store) read(ctx context.Context, sku string) (contract.Audit, map[string]stored, error) {
	var a contract.Audit
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return a, nil, fmt.Errorf("store %s: %w", s.What, err)
	}
	defer func() { _ = tx.Rollback() }()
	err = tx.QueryRowContext(ctx, "SELECT initial_stock, stock FROM products WHERE sku = ?", sku).Scan(&a.InitialStock, &a.Stock)
	if err != nil {
		return a, nil, fmt.Errorf("store products: %w", err)
	}
	err = tx.QueryRowContext(ctx, "SELECT COALESCE(SUM(quantity), 0), COUNT(*), COUNT(DISTINCT user_id) FROM orders WHERE sku = ? AND status IN ('pending', 'confirmed')", sku).
		Scan(&a.OrderedQuantity, &a.Orders, &a.DistinctBuyers)
	if err != nil {
		return a, nil, fmt.Errorf("store orders: %w", err)
	}
	present := map[string]stored{}
	rows, err := tx.QueryContext(ctx, "SELECT order_id, user_id, status FROM orders WHERE sku = ?", sku)
	if err != nil {
		return a, nil, fmt.Errorf("store orders: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, user, status string
		if err := rows.Scan(&id, &user, &status); err != nil {
			return a, nil, err
		}
		present[id] = stored{user, status}
		// Counted for the report, not held against the audit's: the contract leaves how the
		// audit counts an order pending past its deadline to the service.
		switch status {
		case "pending":
			a.Pending++
		case "cancelled":
			a.Cancelled++
		case "expired":
			a.Expired++
		}
	}
	a.Oversold, a.Consistent = max(0, a.OrderedQuantity-a.InitialStock), holds(a)
	return a, present, rows.Err()
}

// Drained waits, within the given time, until the audit of every one of skus counts no order
// queued. A follower may see a queued order's row, or a checkout's, before its writer acked its
// message, which the audit counts queued until then; a queue still holding orders when the time
// is up is left for the verdict to report.
func (vf Verifier) Drained(ctx context.Context, skus []string, within time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for _, sku := range skus {
		for ctx.Err() == nil {
			var a contract.Audit
			if err := vf.Get(ctx, "/api/v1/products/"+sku+"/audit", &a); err == nil && (a.Queued == nil || *a.Queued == 0) {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// VerifyCheckouts verifies a sale of checkouts of one unit of each of lines: each product as
// Verify does, with the acknowledged lines of that product, and, from the tables, every
// checkout among their orders whole — a row for each line, all in one status. The verdict is the
// first product's audit, the units oversold across them, and every product's problems.
func (vf Verifier) VerifyCheckouts(ctx context.Context, lines []string, acked []Order) (Verdict, error) {
	var out Verdict
	for i, sku := range lines {
		var of []Order
		for _, o := range acked {
			if o.SKU == sku {
				of = append(of, o)
			}
		}
		v, err := vf.Verify(ctx, sku, of)
		if err != nil {
			return Verdict{}, err
		}
		if i == 0 {
			out.Audit, out.Store = v.Audit, v.Store
		}
		out.Oversold += v.Oversold
		for _, p := range v.Problems {
			out.Problems = append(out.Problems, sku+": "+p)
		}
	}
	if vf.Store != nil {
		partial, err := vf.Store.partialCheckouts(ctx, lines)
		if err != nil {
			return Verdict{}, err
		}
		out.Problems = append(out.Problems, partial...)
	}
	return out, nil
}

// partialCheckouts describes the checkouts among lines' orders that are not whole: fewer rows
// than lines, or lines in more than one status.
func (s *Store) partialCheckouts(ctx context.Context, lines []string) ([]string, error) {
	args := make([]any, len(lines))
	for i, sku := range lines {
		args[i] = sku
	}
	rows, err := s.db.QueryContext(ctx, `SELECT checkout_id, COUNT(*), COUNT(DISTINCT status) FROM orders
		WHERE checkout_id IS NOT NULL AND sku IN (?`+strings.Repeat(", ?", len(lines)-1)+`) GROUP BY checkout_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("store checkouts: %w", err)
	}
	defer rows.Close()
	var partial []string
	for rows.Next() {
		var (
			id              string
			count, statuses int
		)
		if err := rows.Scan(&id, &count, &statuses); err != nil {
			return nil, err
		}
		if count != len(lines) || statuses != 1 {
			partial = append(partial, fmt.Sprintf("checkout %s is not whole: %d of %d lines, in %d statuses", id, count, len(lines), statuses))
		}
	}
	return partial, rows.Err()
}
