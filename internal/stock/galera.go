package stock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
)

// readCausally reports whether the server is a Galera node and, if so, makes its reads wait
// until it has applied what the cluster committed before (wsrep_sync_wait=1 in cfg.Params). A
// COMMIT returns once certified, not applied everywhere: without the wait another node could
// answer 404 for a product just created, or the sweeper miss an order's row. Writes need no
// wait: a write on stale rows fails certification at COMMIT (1213).
func readCausally(ctx context.Context, probe *sql.DB, cfg *mysql.Config) (galera bool, err error) {
	var name, on string
	// MySQL 8 and TiDB have no such variable: no row.
	err = probe.QueryRowContext(ctx, "SHOW VARIABLES LIKE 'wsrep_on'").Scan(&name, &on)
	if errors.Is(err, sql.ErrNoRows) || err == nil && on != "ON" {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("wsrep_on: %w", classify(err))
	}
	cfg.Params["wsrep_sync_wait"] = "1"
	return true, nil
}

// Ready reports whether the database serves this store now (else ErrUnavailable). Unlike Ping
// it reads a table: a Galera node outside its primary component answers a ping and refuses
// every read (1047). It does not wait for the cluster: it asks whether this node serves.
func (s *Store) Ready(ctx context.Context) error {
	q := "SELECT COUNT(*) FROM products WHERE sku = ''"
	if s.galera {
		q = "SET STATEMENT wsrep_sync_wait = 0 FOR " + q
	}
	var n int64
	if err := s.db.WithContext(ctx).Raw(q).Scan(&n).Error; err != nil {
		return fmt.Errorf("database not ready: %w", classify(err))
	}
	return nil
}
