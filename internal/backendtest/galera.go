package backendtest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/devserver/mariadbserver"
	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// Galera is the test process's MariaDB Galera cluster: three mariadbd nodes on loopback from
// Debian's packages (apt-get install -y galera-4 mariadb-backup socat, which .ci/run does),
// started once, by the first test that asks (GaleraCluster), with the migrated database seckill.
// Its tests stay apart by their SKUs, as on the shared server, and put each service instance on
// a node of its own, as a deployment would spread them. A test that kills a node brings it back
// (Rejoin) before it ends, for the next.
type Galera struct {
	*mariadbserver.Galera
}

var (
	galeraOnce   sync.Once
	galeraShared *Galera
	galeraDir    string
	galeraErr    error
)

// GaleraCluster returns the test process's cluster, started on first use: where Galera is not
// installed the test fails when real backends are required, and is skipped, saying why, otherwise.
func GaleraCluster(t testing.TB) *Galera {
	t.Helper()
	ready(t) // the process's own backends too: SKU's cleanup and AppConfig use them
	if err := mariadbserver.GaleraAvailable(); err != nil {
		if Required() {
			t.Fatalf("Galera is required (SECKILL_TEST_REQUIRE_BACKENDS=1): %v", err)
		}
		t.Skipf("this test needs a Galera cluster: %v", err)
	}
	galeraOnce.Do(func() {
		if galeraDir, galeraErr = os.MkdirTemp("", "seckill-test-galera-"); galeraErr != nil {
			return
		}
		started := time.Now()
		var g *mariadbserver.Galera
		if g, galeraErr = mariadbserver.StartGalera(galeraDir, 3); galeraErr != nil {
			return
		}
		galeraShared = &Galera{Galera: g}
		galeraErr = galeraShared.migrate()
		t.Logf("a 3-node Galera cluster started in %s", time.Since(started).Round(time.Millisecond))
	})
	require.NoError(t, galeraErr, "the test process's Galera cluster")
	return galeraShared
}

// migrate creates the database and migrates it, on the first node: the cluster replicates both.
func (g *Galera) migrate() error {
	ctx := context.Background()
	if err := g.Nodes[0].Exec(ctx, "CREATE DATABASE seckill CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return err
	}
	s, err := g.open(0)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Migrate(ctx, slog.New(slog.DiscardHandler))
}

// stopGalera kills the process's cluster, if one was started.
func stopGalera() {
	if galeraShared != nil {
		galeraShared.Kill()
	}
	if galeraDir != "" {
		_ = os.RemoveAll(galeraDir)
	}
}

// DSN is the DSN of the database seckill on node i, as SECKILL_MYSQL_DSN takes it.
func (g *Galera) DSN(i int) string { return g.Nodes[i].DSN("seckill") }

func (g *Galera) open(i int) (*stock.Store, error) {
	c := storeConfig()
	c.MySQLDSN = g.DSN(i)
	return app.OpenStore(context.Background(), c, io.Discard)
}

// Store returns a new Store on node i, closed in t.Cleanup.
func (g *Galera) Store(t testing.TB, i int) *stock.Store {
	t.Helper()
	s, err := g.open(i)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Instances builds one instance of cfg on each node, in node order, on the backends w names
// beside the database (w.Store is not used), with an order queue of their own on the test NATS
// server (QueueOfItsOwn).
func (g *Galera) Instances(t testing.TB, cfg service.Config, w Wiring) []Instance {
	t.Helper()
	var insts []Instance
	var queue orderqueue.Config
	for i := range g.Nodes {
		c := w.Config(t, cfg)
		if len(c.Queue.URLs) > 0 {
			if queue.Stream == "" {
				queue = QueueOfItsOwn(t, "galera")
			}
			c.Queue = queue
		}
		c.MySQLDSN = g.DSN(i)
		insts = append(insts, Open(t, c, nil))
	}
	return insts
}

// Conflicts are the certification conflicts the cluster's nodes counted so far: take them before
// and after a sale, and log what the sale caused (mariadbserver.Conflicts.Since).
func (g *Galera) Conflicts(t testing.TB) mariadbserver.Conflicts {
	t.Helper()
	c, err := g.Galera.Conflicts(context.Background())
	require.NoError(t, err)
	return c
}

// RequireAgree checks that every node holds the same sale of sku — the product's stock, version
// and orders — and returns the first node's audit.
func (g *Galera) RequireAgree(t testing.TB, sku string) stock.Audit {
	t.Helper()
	ctx := context.Background()
	type sale struct {
		product stock.Product
		audit   stock.Audit
		buyers  []string
	}
	var first sale
	for i := range g.Nodes {
		s := g.Store(t, i)
		var got sale
		var err error
		got.product, err = s.Product(ctx, sku)
		require.NoError(t, err, "node %d", i)
		got.audit, err = s.Audit(ctx, sku)
		require.NoError(t, err, "node %d", i)
		got.buyers, err = s.Buyers(ctx, sku)
		require.NoError(t, err, "node %d", i)
		if i == 0 {
			first = got
			continue
		}
		assert.Equal(t, first.product, got.product, "node %d does not hold node 0's product row", i)
		assert.Equal(t, first.audit, got.audit, "node %d does not hold node 0's sale", i)
		assert.ElementsMatch(t, first.buyers, got.buyers, "node %d does not hold node 0's orders", i)
	}
	return first.audit
}
