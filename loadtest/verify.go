package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	_ "github.com/go-sql-driver/mysql"
)

// audit is the invariant as the database sees it: from GET /audit or straight from SQL.
type audit struct {
	InitialStock    int64  `json:"initial_stock"`
	Stock           int64  `json:"stock"`
	OrderedQuantity int64  `json:"ordered_quantity"`
	Orders          int64  `json:"orders"`
	DistinctBuyers  int64  `json:"distinct_buyers"`
	Oversold        int64  `json:"oversold"`
	Consistent      bool   `json:"consistent"`
	Pending         int64  `json:"pending"`
	Cancelled       int64  `json:"cancelled"`
	Expired         int64  `json:"expired"`
	RedisStock      *int64 `json:"redis_stock,omitempty"`
}

// verdict is what the verifier found after a sale.
type verdict struct {
	Audit    audit    `json:"audit"`
	Oversold int64    `json:"oversold"`
	Problems []string `json:"problems,omitempty"`
}

// ok reports whether the invariant held and every 201 was backed by its order.
func (v verdict) ok() bool { return len(v.Problems) == 0 }

// stored is an order as the server's store holds it.
type stored struct{ user, status string }

// active reports whether an order in this state holds its units.
func active(status string) bool { return status == "pending" || status == "confirmed" }

// check is the invariant over an audit, the 201s the clients were given, and which of those
// orders the server's store holds (present: order id -> user and state there): no negative
// stock, every unit in stock or in one active order, one active order per buyer, every 201
// stored once for its buyer, the active ones exactly the active orders of the audit, and every
// order the buyers paid, cancelled or left unpaid in the state that must follow.
func check(a audit, acked []ackedOrder, present map[string]stored) verdict {
	v := verdict{Audit: a, Oversold: max(0, a.OrderedQuantity-a.InitialStock)}
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

// verifier checks a sale through the HTTP API and, with a DSN, straight in SQL.
type verifier struct {
	client *http.Client
	base   string // any one instance
	token  string
	db     *sql.DB // nil without -mysql
}

// verify runs check on the server's audit and stored orders; with SQL, on the tables too.
func (vf verifier) verify(ctx context.Context, sku string, acked []ackedOrder) (verdict, error) {
	var a audit
	if err := vf.get(ctx, "/api/v1/products/"+sku+"/audit", &a); err != nil {
		return verdict{}, err
	}
	present, err := vf.storedOrders(ctx, acked)
	if err != nil {
		return verdict{}, err
	}
	v := check(a, acked, present)
	if a.Consistent != (a.Stock >= 0 && a.Stock+a.OrderedQuantity == a.InitialStock && a.Orders == a.DistinctBuyers) {
		v.Problems = append(v.Problems, "the server's audit computes consistent wrongly")
	}
	if vf.db != nil {
		sqlAudit, sqlPresent, err := vf.fromSQL(ctx, sku, acked)
		if err != nil {
			return verdict{}, err
		}
		for _, p := range check(sqlAudit, acked, sqlPresent).Problems {
			v.Problems = append(v.Problems, "sql: "+p)
		}
	}
	return v, nil
}

// storedOrders asks the API for every acknowledged order.
func (vf verifier) storedOrders(ctx context.Context, acked []ackedOrder) (map[string]stored, error) {
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
			var got ackedOrder
			err := vf.get(ctx, "/api/v1/orders/"+o.OrderID, &got)
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

func (vf verifier) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, vf.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+vf.token)
	resp, err := vf.client.Do(req)
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

// fromSQL reads the invariant's numbers and the acknowledged orders from the tables of the
// contract (products, orders with their status) — the database's truth: a pending order past its
// deadline is still pending (active) there until the service expires it, though the API already
// reads it as expired. The tool verifies once no order is pending.
func (vf verifier) fromSQL(ctx context.Context, sku string, acked []ackedOrder) (audit, map[string]stored, error) {
	var a audit
	err := vf.db.QueryRowContext(ctx, "SELECT initial_stock, stock FROM products WHERE sku = ?", sku).Scan(&a.InitialStock, &a.Stock)
	if err != nil {
		return a, nil, fmt.Errorf("sql products: %w", err)
	}
	err = vf.db.QueryRowContext(ctx, "SELECT COALESCE(SUM(quantity), 0), COUNT(*), COUNT(DISTINCT user_id) FROM orders WHERE sku = ? AND status IN ('pending', 'confirmed')", sku).
		Scan(&a.OrderedQuantity, &a.Orders, &a.DistinctBuyers)
	if err != nil {
		return a, nil, fmt.Errorf("sql orders: %w", err)
	}
	present := map[string]stored{}
	rows, err := vf.db.QueryContext(ctx, "SELECT order_id, user_id, status FROM orders WHERE sku = ?", sku)
	if err != nil {
		return a, nil, fmt.Errorf("sql orders: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, user, status string
		if err := rows.Scan(&id, &user, &status); err != nil {
			return a, nil, err
		}
		present[id] = stored{user, status}
	}
	return a, present, rows.Err()
}
