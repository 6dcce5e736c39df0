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
// at this moment — fewer or more rows than lines (every checkout here has lines lines; 0: they
// differ, and the count is not judged), or lines in more than one status — and describes each;
// empty when every checkout is whole.
func PartialCheckouts(t testing.TB, db *sql.DB, skus []string, lines int) []string {
	t.Helper()
	args := make([]any, len(skus))
	for i, s := range skus {
		args[i] = s
	}
	rows, err := db.QueryContext(context.Background(), `SELECT checkout_id, COUNT(*), COUNT(DISTINCT status) FROM orders
		WHERE checkout_id IS NOT NULL AND sku IN (?`+strings.Repeat(",?", len(skus)-1)+`) GROUP BY checkout_id`, args...)
	require.NoError(t, err)
	defer rows.Close()
	var partial []string
	for rows.Next() {
		var (
			id              string
			count, statuses int
		)
		require.NoError(t, rows.Scan(&id, &count, &statuses))
		if (lines > 0 && count != lines) || statuses != 1 {
			partial = append(partial, fmt.Sprintf("checkout %s: %d of %d lines, in %d statuses", id, count, lines, statuses))
		}
	}
	require.NoError(t, rows.Err())
	return partial
}

// RequireWholeCheckouts checks that every checkout among skus' orders is whole (every line, one
// status; each checkout here has lines lines), and that every checkout in acked — those answered
// 201 and kept — is in the database with every line active.
func RequireWholeCheckouts(t testing.TB, s *stock.Store, db *sql.DB, skus []string, lines int, acked []stock.Checkout) {
	t.Helper()
	require.Empty(t, PartialCheckouts(t, db, skus, lines), "half a checkout in the database")
	for _, co := range acked {
		got, err := s.Checkout(context.Background(), co.CheckoutID)
		require.NoError(t, err, "acknowledged checkout %s", co.CheckoutID)
		require.Len(t, got.Lines, len(co.Lines), "acknowledged checkout %s", co.CheckoutID)
		require.True(t, got.Status.Active(), "acknowledged checkout %s is %s", co.CheckoutID, got.Status)
	}
}
