package lockstrategy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/stock"
)

// TestHookMoment shows that the fault hook runs at the same moment in every strategy, naive
// included: the lock held, the product read, right before the write. From inside the hook the
// test looks at the lock service (the lock is there: the Redis key, the etcd key, the ZooKeeper
// node, the lock-table row; for pessimistic the product row refuses another transaction), and
// sells one unit behind the section's back, straight in SQL. A section that read the product
// before the hook must then notice: a guarded one by its version check (a retry, and the
// unit sold behind its back stays sold: stock 3 of 5 after its own order), an unguarded one
// and naive by writing over it (the lost update: stock 4 — the read came first, and no guard
// looked). Pessimistic holds the row: the sale behind its back waits for the row and is
// refused (stock 4).
func TestHookMoment(t *testing.T) {
	backendtest.NeedMySQL(t, "the sale behind the section's back is a MariaDB transaction with a lock wait")
	ctx := context.Background()
	for _, tc := range []struct {
		strategy string
		guarded  bool
		held     func(t *testing.T, sku string) bool // nil: no lock
	}{
		{"hybrid", true, redisHeld},
		{"etcd", true, etcdHeld},
		{"zookeeper", true, zkHeld},
		{"dblock", true, tableHeld},
		{"pessimistic", true, nil},
		{"unguarded-redis", false, redisHeld},
		{"unguarded-etcd", false, etcdHeld},
		{"unguarded-zookeeper", false, zkHeld},
		{"naive", false, nil},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			s, sku := onSale(t, 5)
			var (
				once    sync.Once
				held    = true
				behind  error
				entered bool
			)
			cfg := config(tc.strategy)
			cfg.AllowUnsafe = true
			cfg.Hooks = lockstrategy.Hooks{InSection: func(ctx context.Context, orders []stock.OrderRequest) {
				once.Do(func() {
					entered = true
					if tc.held != nil {
						held = tc.held(t, sku)
					}
					behind = sellBehind(ctx, t, sku)
				})
			}}
			w := backendtest.Wiring{Store: s}
			if strings.HasSuffix(tc.strategy, "zookeeper") {
				w.ZKServers = backendtest.ZooKeeperFor(t, "zookeeper")
			}
			inst := newInstances(t, 1, cfg, w)[0]
			_, err := place(inst, stock.OrderRequest{SKU: sku, UserID: "u1", Quantity: 1, Strategy: tc.strategy})
			require.NoError(t, err)
			require.True(t, entered, "the hook never ran")
			assert.True(t, held, "the hook ran without the lock held")
			p, err := s.Product(ctx, sku)
			require.NoError(t, err)
			switch {
			case tc.strategy == "pessimistic":
				var lockWait *mysql.MySQLError
				assert.True(t, errors.As(behind, &lockWait) && lockWait.Number == 1205,
					"the hook ran with the row free: the sale behind its back got %v", behind)
				assert.EqualValues(t, 4, p.Stock, "its own order only")
			case tc.guarded:
				require.NoError(t, behind)
				assert.EqualValues(t, 3, p.Stock, "the version check saw the sale behind its back: both units sold")
				assert.Positive(t, backendtest.Counter(t, "seckill_optimistic_retries_total", map[string]string{"strategy": tc.strategy}, inst),
					"the section wrote without noticing the sale behind its back: it read after the hook")
			default:
				require.NoError(t, behind)
				assert.EqualValues(t, 4, p.Stock, "the unguarded write should have written over the sale behind its back, computed from a read before the hook")
			}
		})
	}
}

// sellBehind sells one unit of sku straight in SQL, in a transaction of its own that waits at
// most a second for the row.
func sellBehind(ctx context.Context, t *testing.T, sku string) error {
	conn, err := backendtest.SQL(t).Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1")
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "UPDATE products SET stock = stock - 1, version = version + 1 WHERE sku = ?", sku)
	return err
}

func redisHeld(t *testing.T, sku string) bool {
	n, err := backendtest.Redis(t).Exists(context.Background(), "seckill:{"+sku+"}:lock").Result()
	require.NoError(t, err)
	return n == 1
}

func etcdHeld(t *testing.T, sku string) bool {
	resp, err := backendtest.Etcd(t).Get(context.Background(), "/seckill/locks/"+sku+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	return resp.Count > 0
}

func zkHeld(t *testing.T, sku string) bool {
	nodes, _, err := backendtest.ZooKeeper(t, backendtest.ZooKeeperServers(t), time.Second).Children("/seckill/locks/" + sku)
	if errors.Is(err, zk.ErrNoNode) {
		return false
	}
	require.NoError(t, err)
	return len(nodes) > 0
}

func tableHeld(t *testing.T, sku string) bool {
	var n int
	require.NoError(t, backendtest.SQL(t).QueryRowContext(context.Background(),
		"SELECT COUNT(*) FROM distributed_locks WHERE lock_name = ?", fmt.Sprint("products/", sku)).Scan(&n))
	return n > 0
}
