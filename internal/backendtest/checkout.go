package backendtest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/stock"
)

// PartialCheckouts reads, in one statement, the checkouts among skus' orders that are not whole
// at this moment — other than lines[buyer] rows (a buyer lines does not name: any number), or
// lines in more than one status — and describes each; empty when every checkout is whole.
func PartialCheckouts(t testing.TB, db *sql.DB, skus []string, lines map[string]int) []string {
	t.Helper()
	args := make([]any, len(skus))
	for i, s := range skus {
		args[i] = s
	}
	rows, err := db.QueryContext(context.Background(), `SELECT checkout_id, MIN(user_id), COUNT(*), COUNT(DISTINCT status) FROM orders
		WHERE checkout_id IS NOT NULL AND sku IN (?`+strings.Repeat(",?", len(skus)-1)+`) GROUP BY checkout_id`, args...)
	require.NoError(t, err)
	defer rows.Close()
	var partial []string
	for rows.Next() {
		var (
			id, user        string
			count, statuses int
		)
		require.NoError(t, rows.Scan(&id, &user, &count, &statuses))
		want, judged := lines[user]
		if (judged && count != want) || statuses != 1 {
			partial = append(partial, fmt.Sprintf("checkout %s of %s: %d of %d lines, in %d statuses", id, user, count, want, statuses))
		}
	}
	require.NoError(t, rows.Err())
	return partial
}

// RequireWholeCheckouts checks that every checkout among skus' orders is whole (every line, one
// status; a buyer's checkout has lines[buyer] lines), and that every checkout in acked — those
// answered 201 and kept — is in the database with every line active.
func RequireWholeCheckouts(t testing.TB, s *stock.Store, db *sql.DB, skus []string, lines map[string]int, acked []stock.Checkout) {
	t.Helper()
	require.Empty(t, PartialCheckouts(t, db, skus, lines), "half a checkout in the database")
	for _, co := range acked {
		got, err := s.Read(context.Background(), stock.CheckoutRef(co.CheckoutID))
		require.NoError(t, err, "acknowledged checkout %s", co.CheckoutID)
		require.Len(t, got.Lines, len(co.Lines), "acknowledged checkout %s", co.CheckoutID)
		require.True(t, got.Status.Active(), "acknowledged checkout %s is %s", co.CheckoutID, got.Status)
	}
}
