package lockstrategy_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

// TestPessimisticRowHeld holds the product row from another client while buyers on three
// instances order under pessimistic, and watches the server's own list of transactions
// (information_schema.innodb_trx) for the sessions of the sale. By default (NOWAIT) a held row
// answers busy within the wait budget — the sections tried again and again — and not one session
// ever waited in the row's lock queue; freed mid-way, the row sells to every buyer. With
// RowLock stock.WaitForRow the sections wait in that queue, at most one per instance, and place
// every order once the row is released.
func TestPessimisticRowHeld(t *testing.T) {
	backendtest.NeedMySQL(t, "the embedded store has no row locks")
	const buyers = 30
	for _, tc := range []struct {
		name    string
		rowLock stock.RowWait
		release time.Duration // when the holder lets the row go; 0: only after the buyers' answers
	}{
		{"nowait, held past the wait", stock.NoWait, 0},
		{"nowait, released", stock.NoWait, time.Second},
		{"wait, released", stock.WaitForRow, time.Second}, // within the lock wait (2 s)
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config("pessimistic")
			cfg.RowLock = tc.rowLock
			insts := newInstances(t, instances, cfg, backendtest.Wiring{})
			s, sku := onSale(t, buyers)
			holder := backendtest.HoldRow(t, sku)
			watch := watchSessions(t, sku)

			start := time.Now()
			if tc.release > 0 {
				time.AfterFunc(tc.release, func() { _, _ = holder.ExecContext(context.Background(), "ROLLBACK") })
			}
			orders, errs, took := make([]stock.Order, buyers), make([]error, buyers), make([]time.Duration, buyers)
			var wg sync.WaitGroup
			for i := range buyers {
				wg.Go(func() {
					req := stock.OrderRequest{SKU: sku, UserID: fmt.Sprintf("user-%02d", i), Quantity: 1, Strategy: "pessimistic"}
					orders[i], _, errs[i] = insts[i%len(insts)].PlaceOrder(context.Background(), req)
					took[i] = time.Since(start)
				})
			}
			wg.Wait()
			sessions, lockWaits := watch()
			t.Logf("%s: answers within %s; at most %d sessions of the sale in a transaction at once, %d of them waiting for the row",
				tc.name, slices.Max(took).Round(time.Millisecond), sessions, lockWaits)

			var acked []stock.Order
			if tc.release == 0 {
				for i, err := range errs {
					assert.ErrorIs(t, err, stock.ErrBusy, "user-%02d: the row was held throughout", i)
					assert.Less(t, took[i], cfg.LockWait+time.Second, "user-%02d: busy within the wait budget", i)
					assert.GreaterOrEqual(t, took[i], cfg.LockWait/2, "user-%02d: the section kept trying while the wait lasted", i)
				}
			} else {
				for i, err := range errs {
					assert.NoError(t, err, "user-%02d: placed once the row was free", i)
					assert.Greater(t, took[i], tc.release, "user-%02d: not before the row was free", i)
				}
				a, err := s.Audit(context.Background(), sku)
				require.NoError(t, err)
				assert.Zero(t, a.Stock, "every buyer bought")
				acked = orders
			}
			assert.LessOrEqual(t, sessions, instances, "at most one session per instance: the batcher's one section")
			if tc.rowLock == stock.NoWait {
				assert.Zero(t, lockWaits, "NOWAIT: no session ever parked in the row's lock queue")
			} else {
				assert.Positive(t, lockWaits, "wait: the sections waited in the row's lock queue")
			}
			backendtest.RequireInvariant(t, s, sku, acked)
		})
	}
}

// watchSessions samples, every 150 ms until the returned function is called, the
// transactions the server is running on sku's behalf — those whose statement names it (the
// store sends its arguments inline) — and returns the most it saw at once, and the most of them
// waiting for a lock (LOCK WAIT). The holder's own transaction runs no statement, and is not
// counted.
func watchSessions(t *testing.T, sku string) func() (sessions, lockWaits int) {
	t.Helper()
	db := backendtest.SQL(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var (
		most, waiting int
		failed        error
	)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var n, w int
			err := db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(trx_state = 'LOCK WAIT'), 0) FROM information_schema.innodb_trx "+
				"WHERE trx_query LIKE ? AND trx_mysql_thread_id <> CONNECTION_ID()", "%"+sku+"%").Scan(&n, &w)
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					failed = err
				}
				return
			}
			most, waiting = max(most, n), max(waiting, w)
			// The server refreshes the table's snapshot only when it was last read more than
			// 0.1 s ago: read more often, and it shows the same moment for ever.
			time.Sleep(150 * time.Millisecond)
		}
	}()
	return func() (int, int) {
		cancel()
		<-done
		if failed != nil && !errors.Is(failed, sql.ErrConnDone) {
			require.NoError(t, failed, "information_schema.innodb_trx")
		}
		return most, waiting
	}
}
