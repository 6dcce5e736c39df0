package stock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
)

// readCausally makes every read on a node of a Galera cluster wait until the node has applied
// what the cluster committed before it (wsrep_sync_wait=1 on each connection: cfg.Params), and
// reports whether the server is such a node. A COMMIT returns once the cluster certified it, not
// once every node applied it: without the wait, an instance on another node could answer 404
// for a product just created, or the sweeper ask about an order before its row arrives. Writes
// need no wait: a write on stale rows fails certification at COMMIT (1213).
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

// Ready reports whether the database serves this store now: ErrUnavailable when it cannot be
// reached or refuses to serve. It reads a table, unlike Ping: a Galera node outside its primary
// component, or still joining it, answers a ping and refuses every read of a table (1047). The
// read does not wait for the cluster (wsrep_sync_wait 0): it asks whether this node serves.
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
