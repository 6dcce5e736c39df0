package lockstrategy_test

import (
	"context"
	"database/sql"
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
// (information_schema.innodb_trx) for the sessions of the sale — a watch first shown to see a
// session parked in the row's lock queue (probe). By default (NOWAIT) a held row answers busy
// within the wait budget — the sections tried again and again — and not one session ever waited
// in the row's lock queue; freed mid-way, the row sells to every buyer. With RowLock
// stock.WaitForRow the sections wait in that queue, at most one per instance, and place every
// order once the row is released: as soon as one is seen waiting there.
func TestPessimisticRowHeld(t *testing.T) {
	backendtest.NeedMySQL(t, "the embedded store has no row locks")
	const buyers = 30
	for _, tc := range []struct {
		name    string
		rowLock stock.RowWait
		freed   bool // the holder lets the row go while the buyers wait; else only after their answers
	}{
		{"nowait, held past the wait", stock.NoWait, false},
		{"nowait, released", stock.NoWait, true},
		{"wait, released", stock.WaitForRow, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config("pessimistic")
			cfg.RowLock = tc.rowLock
			insts := newInstances(t, instances, cfg, backendtest.Wiring{})
			s, sku := onSale(t, buyers)
			holder := backendtest.HoldRow(t, sku)
			watch := watchSessions(t, sku)
			defer watch.stop()
			watch.probe(t)

			var freedAt time.Time
			free := func() {
				_, err := holder.ExecContext(context.Background(), "ROLLBACK")
				assert.NoError(t, err)
				freedAt = time.Now()
			}
			freeing := make(chan struct{})
			switch {
			case !tc.freed:
				close(freeing)
			case tc.rowLock == stock.NoWait:
				// Held for a second while the sections try again and again: the fault's length.
				time.AfterFunc(time.Second, func() { defer close(freeing); free() })
			default:
				go func() {
					defer close(freeing)
					assert.Eventually(t, func() bool { _, waiting := watch.seen(); return waiting > 0 }, 10*time.Second, 10*time.Millisecond,
						"wait: no section was seen waiting in the row's lock queue")
					free()
				}()
			}
			start := time.Now()
			orders, errs, answered := make([]stock.Order, buyers), make([]error, buyers), make([]time.Time, buyers)
			var wg sync.WaitGroup
			for i := range buyers {
				wg.Go(func() {
					req := stock.OrderRequest{SKU: sku, UserID: fmt.Sprintf("user-%02d", i), Quantity: 1, Strategy: "pessimistic"}
					orders[i], _, errs[i] = insts[i%len(insts)].PlaceOrder(context.Background(), req)
					answered[i] = time.Now()
				})
			}
			wg.Wait()
			<-freeing
			watch.stop()
			sessions, lockWaits := watch.seen()
			t.Logf("%s: answers within %s; at most %d sessions of the sale in a transaction at once, %d of them waiting for the row",
				tc.name, slices.MaxFunc(answered, time.Time.Compare).Sub(start).Round(time.Millisecond), sessions, lockWaits)

			var acked []stock.Order
			if !tc.freed {
				for i, err := range errs {
					took := answered[i].Sub(start)
					assert.ErrorIs(t, err, stock.ErrBusy, "user-%02d: the row was held throughout", i)
					assert.Less(t, took, cfg.LockWait+time.Second, "user-%02d: busy within the wait budget", i)
					assert.GreaterOrEqual(t, took, cfg.LockWait/2, "user-%02d: the section kept trying while the wait lasted", i)
				}
			} else {
				for i, err := range errs {
					assert.NoError(t, err, "user-%02d: placed once the row was free", i)
					assert.True(t, answered[i].After(freedAt), "user-%02d: not before the row was free", i)
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

// sessionWatch samples the transactions the server runs on a product's behalf: those whose
// statement names its SKU (the store sends its arguments inline).
type sessionWatch struct {
	sku  string
	db   *sql.DB
	stop func() // ends the sampling; once stopped, seen is final

	mu               sync.Mutex
	most, waiting    int   // the most sessions of the sale seen at once, and of them waiting for a lock (LOCK WAIT)
	probeID          int64 // the probe's connection: not the sale's
	probeSeenWaiting bool
	failed           error
}

// watchSessions starts sampling sku's sessions, every 150 ms until stop: the server refreshes
// the table's snapshot only when it was last read more than 0.1 s ago — read more often, and it
// shows the same moment for ever. The holder's own transaction runs no statement, and is not
// counted; nor is the watch's own.
func watchSessions(t *testing.T, sku string) *sessionWatch {
	t.Helper()
	w := &sessionWatch{sku: sku, db: backendtest.SQL(t)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(150 * time.Millisecond)
		defer tick.Stop()
		for {
			if err := w.sample(ctx); err != nil {
				if ctx.Err() == nil {
					w.mu.Lock()
					w.failed = err
					w.mu.Unlock()
				}
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	w.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			w.mu.Lock()
			defer w.mu.Unlock()
			require.NoError(t, w.failed, "information_schema.innodb_trx")
		})
	}
	return w
}

// sample reads the server's transactions once.
func (w *sessionWatch) sample(ctx context.Context) error {
	rows, err := w.db.QueryContext(ctx, "SELECT trx_mysql_thread_id, trx_state FROM information_schema.innodb_trx "+
		"WHERE trx_query LIKE ? AND trx_mysql_thread_id <> CONNECTION_ID()", "%"+w.sku+"%")
	if err != nil {
		return err
	}
	defer rows.Close()
	var n, waiting int
	w.mu.Lock()
	defer w.mu.Unlock()
	for rows.Next() {
		var (
			thread int64
			state  string
		)
		if err := rows.Scan(&thread, &state); err != nil {
			return err
		}
		switch {
		case thread == w.probeID:
			w.probeSeenWaiting = w.probeSeenWaiting || state == "LOCK WAIT"
		case state == "LOCK WAIT":
			n, waiting = n+1, waiting+1
		default:
			n++
		}
	}
	w.most, w.waiting = max(w.most, n), max(w.waiting, waiting)
	return rows.Err()
}

// seen is the most sessions of the sale seen in a transaction at once, and of them waiting for a
// lock.
func (w *sessionWatch) seen() (sessions, lockWaits int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most, w.waiting
}

// probe parks a session of the test's own in the row's lock queue — what a NOWAIT section must
// never do — until the watch has seen it waiting, then ends it: a watch that could not see a
// parked session would prove nothing by seeing none. The row must be held.
func (w *sessionWatch) probe(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	conn, err := w.db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	var id int64
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id))
	w.mu.Lock()
	w.probeID = id
	w.mu.Unlock()
	require.Regexp(t, `^[A-Za-z0-9._-]+$`, w.sku, "a SKU is safe inline")
	parked := make(chan error, 1)
	go func() {
		// Inline, as the store sends it: the watch knows a statement by the SKU in its text.
		_, err := conn.ExecContext(ctx, "SELECT stock FROM products WHERE sku = '"+w.sku+"' FOR UPDATE")
		parked <- err
	}()
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.probeSeenWaiting
	}, 10*time.Second, 10*time.Millisecond, "the watch never saw a session waiting for the row: it is blind")
	_, err = w.db.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", id))
	require.NoError(t, err)
	require.Error(t, <-parked, "the probe ended without the row")
}
