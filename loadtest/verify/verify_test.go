package verify

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/contract"
)

func TestCheck(t *testing.T) {
	acked := []Order{{OrderID: "o1", UserID: "u1"}, {OrderID: "o2", UserID: "u2"}}
	kept := map[string]stored{"o1": {"u1", "confirmed"}, "o2": {"u2", "pending"}}
	good := contract.Audit{InitialStock: 5, Stock: 3, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 2, Consistent: true}
	assert.True(t, check(good, acked, kept).OK())
	none, one := int64(0), int64(1)
	drained := good
	drained.Queued = &none
	assert.True(t, check(drained, acked, kept).OK(), "the queued strategy's audit, nothing left queued")
	stuck := good
	stuck.Queued = &one
	assert.Contains(t, strings.Join(check(stuck, acked, kept).Problems, "; "), "1 orders still queued after the sale",
		"an order the audit still counts queued once every 202 ended")
	cancelled := []Order{{OrderID: "o1", UserID: "u1", Want: "cancelled"}, {OrderID: "o2", UserID: "u2"}}
	afterCancel := map[string]stored{"o1": {"u1", "cancelled"}, "o2": {"u2", "confirmed"}}
	assert.True(t, check(contract.Audit{InitialStock: 5, Stock: 4, OrderedQuantity: 1, Orders: 1, DistinctBuyers: 1}, cancelled, afterCancel).OK(),
		"a cancelled order holds nothing")

	for _, tc := range []struct {
		name    string
		audit   contract.Audit
		acked   []Order
		stored  map[string]stored
		problem string
	}{
		{"planted oversell", contract.Audit{InitialStock: 5, Stock: 0, OrderedQuantity: 7, Orders: 2, DistinctBuyers: 2}, acked, kept, "oversold by 2"},
		{"lost update", contract.Audit{InitialStock: 5, Stock: 4, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 2}, acked, kept, "stock 4 + ordered 2 != initial 5"},
		{"negative stock", contract.Audit{InitialStock: 1, Stock: -1, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 2}, acked, kept, "negative"},
		{"a user twice", contract.Audit{InitialStock: 5, Stock: 3, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 1}, acked, kept, "a user holds two"},
		{"a lost order", good, acked, map[string]stored{"o1": {"u1", "confirmed"}}, "o2 was acknowledged but is not stored"},
		{"an order for someone else", good, acked, map[string]stored{"o1": {"u1", "confirmed"}, "o2": {"u9", "confirmed"}}, "stored for u9"},
		{"acknowledged twice", contract.Audit{InitialStock: 5, Stock: 3, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 2},
			[]Order{{OrderID: "o1", UserID: "u1"}, {OrderID: "o1", UserID: "u1"}}, kept, "acknowledged twice"},
		{"an order nobody was told of", contract.Audit{InitialStock: 5, Stock: 2, OrderedQuantity: 3, Orders: 3, DistinctBuyers: 3}, acked, kept,
			"2 acknowledged orders active, 3 active in the store"},
		{"a cancel that did not take", contract.Audit{InitialStock: 5, Stock: 3, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 2}, cancelled, kept,
			"o1 should be cancelled but is confirmed"},
		{"a unit returned twice", contract.Audit{InitialStock: 5, Stock: 5, OrderedQuantity: 1, Orders: 1, DistinctBuyers: 1}, cancelled, afterCancel,
			"stock 5 + ordered 1 != initial 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := check(tc.audit, tc.acked, tc.stored)
			require.False(t, v.OK(), "the verifier passed a broken sale")
			assert.Contains(t, strings.Join(v.Problems, "; "), tc.problem)
		})
	}
}

// TestCrossCheck: the service's audit is what is under test, so an audit that says other than the
// tables fails the verdict, field by field, even when it says the sale is consistent.
func TestCrossCheck(t *testing.T) {
	tables := contract.Audit{InitialStock: 5, Stock: 3, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 2, Consistent: true}
	assert.Empty(t, disagreements(tables, tables), "an audit that agrees")
	for _, tc := range []struct {
		name    string
		served  func(a *contract.Audit)
		problem string
	}{
		{"initial stock", func(a *contract.Audit) { a.InitialStock = 6 }, "initial_stock 6, the tables 5"},
		{"stock", func(a *contract.Audit) { a.Stock = 4 }, "stock 4, the tables 3"},
		{"ordered", func(a *contract.Audit) { a.OrderedQuantity = 1 }, "ordered_quantity 1, the tables 2"},
		{"orders", func(a *contract.Audit) { a.Orders = 3 }, "orders 3, the tables 2"},
		{"buyers", func(a *contract.Audit) { a.DistinctBuyers = 1 }, "distinct_buyers 1, the tables 2"},
		{"oversold", func(a *contract.Audit) { a.Oversold = 1 }, "oversold 1, the tables 0"},
		{"consistent", func(a *contract.Audit) { a.Consistent = false }, "consistent false, the tables true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served := tables
			tc.served(&served)
			assert.Equal(t, []string{"the service's audit says " + tc.problem}, disagreements(tables, served))
		})
	}
}

// TestVerifyInTheStore: the verifier reads the tables of a SQLite store itself — read-only, while
// a writer holds the database's write lock — and fails a sale whose audit hides the oversell the
// tables show; with an honest audit the same sale fails on the oversell alone.
func TestVerifyInTheStore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "seckill.db")
	writer, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Close() })
	for _, stmt := range []string{
		"CREATE TABLE products (sku TEXT PRIMARY KEY, initial_stock INTEGER NOT NULL, stock INTEGER NOT NULL)",
		"CREATE TABLE orders (order_id TEXT PRIMARY KEY, sku TEXT NOT NULL, user_id TEXT NOT NULL, quantity INTEGER NOT NULL, status TEXT NOT NULL)",
		// A lost update: three units sold of two, the stock at 0.
		"INSERT INTO products VALUES ('lt-x', 2, 0)",
		"INSERT INTO orders VALUES ('o1', 'lt-x', 'u1', 1, 'confirmed'), ('o2', 'lt-x', 'u2', 1, 'confirmed'), ('o3', 'lt-x', 'u3', 1, 'pending'), ('o4', 'lt-x', 'u4', 1, 'cancelled')",
	} {
		_, err := writer.Exec(stmt)
		require.NoError(t, err, stmt)
	}
	store, err := OpenSQLite(ctx, path)
	require.NoError(t, err)
	t.Cleanup(store.Close)
	_, err = store.db.Exec("UPDATE products SET stock = 9")
	require.Error(t, err, "the tool's reader cannot write the store it checks")

	// The service is writing meanwhile: a transaction holds the write lock, uncommitted.
	busy, err := writer.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = busy.Exec("UPDATE products SET stock = 7 WHERE sku = 'lt-x'")
	require.NoError(t, err)
	t.Cleanup(func() { _ = busy.Rollback() })

	acked := []Order{{OrderID: "o1", UserID: "u1"}, {OrderID: "o2", UserID: "u2"}, {OrderID: "o3", UserID: "u3"}}
	honest := contract.Audit{InitialStock: 2, Stock: 0, OrderedQuantity: 3, Orders: 3, DistinctBuyers: 3, Oversold: 1}
	lying := contract.Audit{InitialStock: 2, Stock: 0, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 2, Consistent: true}
	for _, tc := range []struct {
		name   string
		served contract.Audit
		want   []string
	}{
		{"an audit that hides the oversell", lying, []string{
			"stock 0 + ordered 3 != initial 2", "oversold by 1",
			"the service's audit says ordered_quantity 2, the tables 3", "the service's audit says orders 2, the tables 3",
			"the service's audit says distinct_buyers 2, the tables 3", "the service's audit says oversold 0, the tables 1",
			"the service's audit says consistent true, the tables false",
			"api: 3 acknowledged orders active, 2 active in the store",
		}},
		{"an honest audit", honest, []string{"stock 0 + ordered 3 != initial 2", "oversold by 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/api/v1/products/lt-x/audit" {
					_ = json.NewEncoder(w).Encode(tc.served)
					return
				}
				id := strings.TrimPrefix(r.URL.Path, "/api/v1/orders/")
				status := map[string]string{"o3": "pending"}[id]
				if status == "" {
					status = "confirmed"
				}
				_ = json.NewEncoder(w).Encode(Order{OrderID: id, UserID: "u" + strings.TrimPrefix(id, "o"), Status: status})
			}))
			defer srv.Close()
			vf := Verifier{Client: srv.Client(), Base: srv.URL, Token: "t", Store: store}
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			v, err := vf.Verify(ctx, "lt-x", acked)
			require.NoError(t, err, "read beside a writer holding the write lock")
			assert.Equal(t, tc.want, v.Problems)
			assert.Equal(t, int64(1), v.Oversold, "the oversell as the tables have it")
			require.NotNil(t, v.Store)
			assert.Equal(t, contract.Audit{InitialStock: 2, Stock: 0, OrderedQuantity: 3, Orders: 3, DistinctBuyers: 3, Oversold: 1, Pending: 1, Cancelled: 1}, *v.Store,
				"the committed tables, not the writer's uncommitted stock")
			assert.Equal(t, tc.served, v.Audit)
		})
	}
}

// TestPartialCheckouts: the store check of a checkout sale finds a checkout with a line missing
// and one whose lines disagree on their status, and passes a whole one.
func TestPartialCheckouts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "seckill.db")
	writer, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Close() })
	for _, stmt := range []string{
		"CREATE TABLE orders (order_id TEXT PRIMARY KEY, sku TEXT NOT NULL, user_id TEXT NOT NULL, quantity INTEGER NOT NULL, status TEXT NOT NULL, checkout_id TEXT)",
		"INSERT INTO orders VALUES ('o1', 'a', 'u1', 1, 'confirmed', 'whole'), ('o2', 'b', 'u1', 1, 'confirmed', 'whole')",
		"INSERT INTO orders VALUES ('o3', 'a', 'u2', 1, 'confirmed', 'half')",
		"INSERT INTO orders VALUES ('o4', 'a', 'u3', 1, 'confirmed', 'split'), ('o5', 'b', 'u3', 1, 'cancelled', 'split')",
		"INSERT INTO orders VALUES ('o6', 'a', 'u4', 1, 'confirmed', NULL)",
	} {
		_, err := writer.Exec(stmt)
		require.NoError(t, err, stmt)
	}
	store, err := OpenSQLite(ctx, path)
	require.NoError(t, err)
	t.Cleanup(store.Close)
	partial, err := store.partialCheckouts(ctx, []string{"a", "b"})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{
		"checkout half is not whole: 1 of 2 lines, in 1 statuses",
		"checkout split is not whole: 2 of 2 lines, in 2 statuses",
	}, partial)
}
