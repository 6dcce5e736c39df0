package lab

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/flashsale/seckill/devserver/mariadbserver"
	"github.com/flashsale/seckill/internal/stock"
)

// dbFailover is the database's own failover incident, the sibling of failover: the lock and the
// rows live on one primary, and a primary with an asynchronous replica acknowledges a COMMIT
// before the replica has it. Here the replication link is cut (a fault proxy between the
// replica and its primary), the sale goes on, the primary dies and the replica is promoted: the
// orders answered 201 since the cut have no row, and their units are sold again. The same sale
// runs on semi-synchronous replication (AFTER_SYNC: no COMMIT is answered before the replica has
// it) and on a three-node Galera cluster (a COMMIT is certified by the whole group; the node cut
// off from it refuses), where no acknowledged order is lost. Judged on the rows of the promoted
// database, with pessimistic — the database's own lock, whose drawback this is.
func dbFailover() Experiment {
	return Experiment{
		Name: "db-failover",
		Seed: "«Choosing a lock», the database lock's drawbacks: 单点故障 (a single point of failure), sensitive to the lag between a primary and its replicas (对主从架构下的延时敏感)",
		Claim: "A primary that dies with acknowledged orders its asynchronous replica never received loses them when the replica is promoted: their buyers were told yes, no row is left, and their units are sold again; " +
			"semi-synchronous replication or a Galera cluster answers no COMMIT the others do not have, and loses none.",
		Fix: `--rpl-semi-sync-master-enabled=ON --rpl-semi-sync-master-wait-point=AFTER_SYNC (or a Galera cluster: wsrep_on=ON)`,
		Run: runDBFailover,
	}
}

// dbForm is one way the database is replicated.
type dbForm string

const (
	asyncReplica dbForm = "asynchronous replica"
	semiSync     dbForm = "semi-synchronous replica"
	galera       dbForm = "Galera cluster"
)

func runDBFailover(ctx context.Context, env *Env) (Result, error) {
	if err := env.needRedis(); err != nil {
		return Result{}, err
	}
	if err := mariadbserver.Available(); err != nil {
		return Result{}, &NotRun{Why: err.Error()}
	}
	units := pick(env.Size, 12, 100)
	forms := []dbForm{asyncReplica, semiSync, galera}
	var notRun []Part
	if err := mariadbserver.GaleraAvailable(); err != nil {
		forms, notRun = forms[:2], []Part{{Name: "Galera", Why: err.Error()}}
	}
	chart := Chart{Title: fmt.Sprintf("Orders answered 201 with no row after the failover, of %d units (pessimistic)", units), Unit: "orders"}
	said := map[dbForm]string{}
	lost := map[dbForm]int{}
	for _, form := range forms {
		s, err := sellAcrossDBFailover(ctx, env, form, env.key("db-failover", string(form[0])), units)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", form, err)
		}
		lost[form] = s.lost
		said[form] = s.String()
		chart.Bars = append(chart.Bars, Bar{Label: string(form), Value: float64(s.lost), Failed: s.lost > 0})
	}
	fixed := fmt.Sprintf("%s: %s", semiSync, said[semiSync])
	if len(forms) == 3 {
		fixed += fmt.Sprintf("; %s: %s", galera, said[galera])
	}
	return Result{
		Failing: Outcome{Form: "pessimistic on a primary with an asynchronous replica, promoted after the primary died", Happened: said[asyncReplica], Failed: lost[asyncReplica] > 0},
		Fixed:   Outcome{Form: "the same on a semi-synchronous replica (AFTER_SYNC), and on a Galera cluster", Happened: fixed, Failed: lost[semiSync] > 0 || lost[galera] > 0},
		NotRun:  notRun,
		Chart:   chart,
	}, nil
}

// dbFailedOver is what one sale across a database failover did.
type dbFailedOver struct {
	cut        map[string]int // the answers of the buyers who bought after the link was cut
	acked      int            // orders answered 201, in the whole sale
	lost       int            // of them, orders with no row on the database that took over
	promotedIn time.Duration  // from the primary's death until the other database took writes
	audit      stock.Audit    // of the database that took over, after the sale
}

func (s dbFailedOver) String() string {
	out := fmt.Sprintf("the buyers after the cut heard %s; writes went to the other database %.1f s after the primary died; %d orders answered 201, %d of them with no row there",
		codes(s.cut), s.promotedIn.Seconds(), s.acked, s.lost)
	if s.lost > 0 {
		out += fmt.Sprintf(" — their units sold again: %d answered 201 for %d units", s.acked, s.audit.InitialStock)
	}
	return out + "; " + column(s.audit)
}

// codes lists answers by code, in order: "ok 2, busy 1".
func codes(answers map[string]int) string {
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(answers)) {
		parts = append(parts, fmt.Sprintf("%s %d", code, answers[code]))
	}
	return strings.Join(parts, ", ")
}

// dbServers is the primary of one form and what takes over from it: start brings them up,
// cut cuts the primary off from the others, and failover kills the primary and returns the DSN
// of the database that takes writes after it.
type dbServers struct {
	primary  string
	cut      func(ctx context.Context) error
	failover func(ctx context.Context) (string, error)
	stop     func()
}

// startDatabase brings up the servers of form in dir.
func startDatabase(ctx context.Context, form dbForm, dir string) (*dbServers, error) {
	const db = "seckill_lab"
	create := "CREATE DATABASE " + db + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	if form == galera {
		g, err := mariadbserver.StartGalera(dir, 3)
		if err != nil {
			return nil, err
		}
		if err := g.Nodes[0].Exec(ctx, create); err != nil {
			g.Kill()
			return nil, err
		}
		return &dbServers{
			primary: g.Nodes[0].DSN(db),
			// The node behind a broken link: outside the primary component, it refuses.
			cut: func(ctx context.Context) error { return g.Isolate(ctx, 0) },
			failover: func(context.Context) (string, error) {
				g.Nodes[0].Kill()
				// Nothing to promote: the others are the cluster, once they have dropped the node.
				return g.Nodes[1].DSN(db), g.WaitFormed(30 * time.Second)
			},
			stop: g.Kill,
		}, nil
	}
	primary, replica, err := mariadbserver.NewReplicated(dir, form == semiSync)
	if err != nil {
		return nil, err
	}
	d := &dbServers{primary: primary.DSN(db), stop: func() { mariadbserver.Kill(primary, replica) }}
	// The replication link runs through a fault proxy, so that it can be cut at a known moment.
	link := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		"replication", "127.0.0.1:0", primary.Addr())
	err = errors.Join(primary.Start(), replica.Start(), link.Start())
	if err == nil {
		err = replica.Replicate(ctx, link.Listen)
	}
	if err == nil && form == semiSync {
		err = primary.WaitSemiSync(30 * time.Second)
	}
	if err == nil {
		err = primary.Exec(ctx, create)
	}
	if err != nil {
		link.Stop()
		d.stop()
		return nil, err
	}
	d.stop = func() { link.Stop(); mariadbserver.Kill(primary, replica) }
	d.cut = func(ctx context.Context) error {
		if err := replica.WaitCaughtUp(ctx, primary, 30*time.Second); err != nil {
			return err
		}
		link.Stop() // its connections closed: the replica's reconnections are refused
		return nil
	}
	d.failover = func(ctx context.Context) (string, error) {
		primary.Kill()
		return replica.DSN(db), replica.Promote(ctx)
	}
	return d, nil
}

// sellAcrossDBFailover: two service instances on the primary (pessimistic) sell a third of the
// units, which reach the other databases; the link is cut; buyers for a sixth of the units ask,
// and are answered or not within 2 s; the primary dies and the other database takes over; two new
// instances on it sell the rest — the buyers without an answer asking again with their
// Idempotency-Key, then new buyers until it is sold out. The rows of the database that took over
// are the judge.
func sellAcrossDBFailover(ctx context.Context, env *Env, form dbForm, sku string, units int) (dbFailedOver, error) {
	dir, err := os.MkdirTemp("", "seckill-lab-db-")
	if err != nil {
		return dbFailedOver{}, err
	}
	defer os.RemoveAll(dir)
	d, err := startDatabase(ctx, form, dir)
	if err != nil {
		return dbFailedOver{}, err
	}
	defer d.stop()

	on := func(dsn string) ([]*instance, func(), error) {
		var insts []*instance
		closeAll := func() {
			for _, i := range insts {
				_ = i.close()
			}
		}
		for range 2 {
			c := env.config(labConfig("pessimistic"))
			c.MySQLDSN = dsn
			inst, err := env.newInstance(ctx, c)
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			insts = append(insts, inst)
		}
		return insts, closeAll, nil
	}
	before, closeBefore, err := on(d.primary)
	if err != nil {
		return dbFailedOver{}, err
	}
	defer closeBefore()
	if _, err := before[0].PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: sku, Stock: int64(units), MaxPerOrder: 1}); err != nil {
		return dbFailedOver{}, err
	}
	b := &keyedBuyers{sku: sku, acked: map[string]string{}}
	b.buy(ctx, before, "early", units/3)
	if err := d.cut(ctx); err != nil {
		return dbFailedOver{}, err
	}
	// The primary serves the buyers after the cut for a while, then dies. A semi-synchronous one
	// answers none of them meanwhile: their COMMITs wait for the replica, until the death ends
	// their connections.
	answered := make(chan map[string]int, 1)
	go func() { answered <- b.buy(ctx, before, "cut", units/6) }()
	var out dbFailedOver
	select {
	case out.cut = <-answered:
	case <-time.After(2 * time.Second):
	}
	died := time.Now()
	dsn, err := d.failover(ctx)
	if err != nil {
		return dbFailedOver{}, err
	}
	if out.cut == nil {
		out.cut = <-answered
	}
	closeBefore()
	after, closeAfter, err := on(dsn)
	if err != nil {
		return dbFailedOver{}, err
	}
	defer closeAfter()
	out.promotedIn = time.Since(died)
	b.retry(ctx, after)
	b.buy(ctx, after, "late", 2*units)

	store := after[0].app.Store()
	for id := range b.acked {
		if _, err := store.Order(ctx, id); errors.Is(err, stock.ErrNotFound) {
			out.lost++
		} else if err != nil {
			return dbFailedOver{}, err
		}
	}
	out.acked = len(b.acked)
	out.audit, err = store.Audit(ctx, sku)
	return out, err
}

// keyedBuyers are the buyers of one sale, each with an Idempotency-Key: the orders answered 201
// (by id, with their buyer), and the buyers who had no answer, to ask again. They ask again in
// rounds (retry), not as a buyer.Buyer does: the experiment asks once across the cut and again
// after the failover, by key, to count what the cut left unanswered.
type keyedBuyers struct {
	sku   string
	mu    sync.Mutex
	acked map[string]string
	asked []string
}

// buy has n buyers named prefix-i buy a unit at once, spread over places, and counts their
// answers by code.
func (k *keyedBuyers) buy(ctx context.Context, places []*instance, prefix string, n int) map[string]int {
	users := make([]string, n)
	for i := range users {
		users[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return k.place(ctx, places, users)
}

// retry asks again for every buyer who had no answer, with the same Idempotency-Key.
func (k *keyedBuyers) retry(ctx context.Context, places []*instance) {
	k.mu.Lock()
	users := k.asked
	k.asked = nil
	k.mu.Unlock()
	k.place(ctx, places, users)
}

func (k *keyedBuyers) place(ctx context.Context, places []*instance, users []string) map[string]int {
	answers := map[string]int{}
	var wg sync.WaitGroup
	for i, user := range users {
		wg.Go(func() {
			o, _, err := places[i%len(places)].PlaceOrder(ctx, stock.OrderRequest{SKU: k.sku, UserID: user, Quantity: 1,
				Strategy: "pessimistic", IdempotencyKey: k.sku + "/" + user})
			k.mu.Lock()
			defer k.mu.Unlock()
			answers[stock.Code(err)]++
			switch {
			case err == nil:
				k.acked[o.OrderID] = user
			case !errors.Is(err, stock.ErrSoldOut):
				k.asked = append(k.asked, user)
			}
		})
	}
	wg.Wait()
	return answers
}
