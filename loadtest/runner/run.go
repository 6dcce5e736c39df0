// Package runner is the load tool (cmd: loadtest): it parses the command line, starts what the
// run needs (the service processes, their etcd and ZooKeeper, the bare servers), runs the sales
// and the fault, verifies each, and writes the report.
package runner

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/flashsale/seckill/devserver/natsserver"
	"github.com/flashsale/seckill/devserver/zkserver"
	"github.com/flashsale/seckill/loadtest/attack"
	"github.com/flashsale/seckill/loadtest/cpu"
	"github.com/flashsale/seckill/loadtest/lockloss"
	"github.com/flashsale/seckill/loadtest/proc"
	"github.com/flashsale/seckill/loadtest/report"
	"github.com/flashsale/seckill/loadtest/verify"
)

// ServeReexecuted runs the process the tool re-executed itself as — a bare server (startBare),
// the services' etcd (startEtcdProcess) — and reports whether it was one. The tool's main, and
// the tests' TestMain (under go test, os.Executable is the test binary), call it first.
func ServeReexecuted(ctx context.Context) (served bool, err error) {
	if addr, ok := os.LookupEnv(bareAddrEnv); ok {
		return true, serveBare(ctx, addr, os.Stdout)
	}
	if dir, ok := os.LookupEnv(etcdDirEnv); ok {
		return true, serveEtcd(ctx, dir, os.Stdout)
	}
	return false, nil
}

// Run is the whole tool on its command line args; main and the tests call it.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "seckill-loadtest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var (
		db     *sql.DB
		budget dbBudget
	)
	if o.mysql != "" {
		if o.targets == "" {
			if err := createDatabase(ctx, o.mysql); err != nil {
				return fmt.Errorf("-mysql: create the database: %w", err)
			}
		}
		if db, err = openDB(o.mysql); err != nil {
			return fmt.Errorf("-mysql: %w", err)
		}
		defer db.Close()
		if budget, err = planConnections(ctx, db, o, os.Getenv); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "loadtest: %s\n", budget)
	}
	prov := provenanceLine(ctx, args, o, db) // the commit that runs, before anyone edits the tree meanwhile
	var progress io.Writer
	if o.progress {
		progress = stderr
	}
	description := fmt.Sprintf("%d units, %d buyers, %d requests, %s, against %s.", o.stock, o.users, o.requests, model(o), o.targets)
	instances := len(strings.Split(o.targets, ","))
	var (
		bin     string
		etcdPid int
	)
	if o.targets == "" {
		o.token = randomToken()
		if bin, err = proc.Build(ctx, dir, stderr); err != nil {
			return err
		}
		etcd, err := startEtcdProcess(ctx, dir, stderr)
		if err != nil {
			return err
		}
		defer proc.Stop([]*proc.Instance{etcd})
		o.etcd, etcdPid = etcd.URL, etcd.Cmd.Process.Pid
		if o.zk == zkStart {
			zk, err := startZooKeeper(dir, stderr)
			if err != nil {
				return err
			}
			defer zkserver.Kill(zk)
			o.zk = zk.Addr
		}
		if o.nats == "" && (o.waitingRoom == 0 || o.strategy == "queued") {
			switch err := natsserver.Available(); {
			case err == nil:
				nats, err := startNATS(dir, stderr)
				if err != nil {
					return err
				}
				defer natsserver.Kill(nats)
				o.nats = nats.URL
			case o.spawn > 1:
				o.noQueue = err.Error()
				fmt.Fprintf(stderr, "loadtest: queued not compared: its instances need one queue (-nats): %v\n", err)
			}
		}
		instances = o.spawn
		description = fmt.Sprintf("%d units, %d buyers, %d requests, %s, against %d service process(es) started by the tool (%s)%s%s.",
			o.stock, o.users, o.requests, model(o), o.spawn, backendsText(o), passesText(o), faultText(o))
	}
	if o.waitingRoom > 0 {
		return runWaitingRoom(ctx, o, bin, dir, db, prov, stdout, stderr)
	}
	description += roundsText(o) + " " + storeText(o)
	var thief *lockloss.Thief
	if o.fault != "" {
		if thief, err = lockloss.NewThief(o.redis, o.etcd, o.zk, stderr); err != nil {
			return err
		}
		defer thief.Close()
		if o.mysql != "" {
			slow, stopSlow, err := lockloss.SlowDatabase(o.mysql, lockloss.DBLatency)
			if err != nil {
				return err
			}
			defer stopSlow()
			o.serviceMySQL = slow
		}
	}

	// The bare handler: the ceiling the service's sold-out answers are held against, measured
	// just before each sold-out phase.
	var bare *bareServers
	if o.compare && o.soldOut > 0 {
		if bare, err = startBare(ctx, o, instances, dir, stderr); err != nil {
			return err
		}
		defer bare.stop()
	}
	client := &http.Client{Timeout: o.timeout}
	backends := cpu.Backends(cpu.Run{MySQL: o.mysql, Redis: o.redis, ZooKeeper: o.zk, NATS: o.nats, Spawned: o.targets == "", EtcdPID: etcdPid})
	var (
		perRound     = make([][]report.Row, o.rounds) // every row of each round
		roundSales   = make([]map[string]attack.Sale, o.rounds)
		soakProblems []string
	)
	for k := range roundSales {
		roundSales[k] = map[string]attack.Sale{}
	}
	var (
		rows []report.Row // of the round and client count running now, in the order of the report
		last int          // their round
	)
	for _, st := range o.schedule() {
		if st.first {
			perRound[last] = append(perRound[last], rows...)
			rows, last = nil, st.round
		}
		if o.rounds > 1 && st.first && st.clients == o.clients[0] {
			fmt.Fprintf(stderr, "loadtest: round %d of %d\n", st.round+1, o.rounds)
		}
		o.concurrency = st.clients
		p, k := st.pass, st.round
		err := func() error {
			targets, pids, err := p.start(ctx, o, bin, dir, stderr)
			if err != nil {
				return err
			}
			defer p.stop()
			store, err := p.store(ctx, db, stderr)
			if err != nil {
				return err
			}
			defer store.Close()
			vf := verify.Verifier{Client: client, Base: targets[0], Token: o.token, Store: store}
			rr := roundRunner{opts: o, pass: p, targets: targets, client: client, verifier: vf, peaks: proc.Peaks{PIDs: pids},
				bare: bare, fault: thief, progress: progress, log: stderr, db: budget,
				cpu: cpu.NewMeter(append([]cpu.Group{cpu.Services(targets, pids)}, backends...)...)}
			if st.first && db != nil && o.compare {
				b, err := rr.baselineReport(ctx, db, o.roundSuffix(k))
				if err != nil {
					return err
				}
				perRound[k] = append(perRound[k], b)
			}
			rs, ss, err := rr.round(ctx, o.roundSuffix(k))
			if err != nil {
				return err
			}
			rows = slices.Insert(rows, p.rowsAt(rows), rs...)
			maps.Copy(roundSales[k], ss)
			if o.soak > 0 {
				soakProblems, err = rr.soak(ctx, stdout)
			}
			return err
		}()
		if err != nil {
			return err
		}
	}
	perRound[last] = append(perRound[last], rows...)
	reports, sales := judge(report.Combine(perRound), o.clients, bare, roundSales)
	fmt.Fprintf(stdout, "\n%s\n\n%s\n\n", prov, description)
	report.Markdown(stdout, reports)
	if err := report.Write(o.out, prov, description, reports, sales); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nreport: %s (report.md, report.html, summary.json, results-*.json)\n", o.out)
	var failed []string
	for _, r := range reports {
		for _, f := range r.Failed {
			failed = append(failed, r.Strategy+": "+f)
		}
	}
	for _, p := range soakProblems {
		failed = append(failed, "soak: "+p)
	}
	if len(failed) > 0 {
		return fmt.Errorf("verification failed:\n  %s", strings.Join(failed, "\n  "))
	}
	return nil
}

// judge puts the combined rows of every round in the report's order — at each client count the
// baseline, the bare handler, then the rows as they ran — holds each against the baseline of its
// count and the rows of its pass, on their medians, and picks the sale each row's charts show:
// its median round's.
func judge(combined []report.Row, clients []int, bare *bareServers, roundSales []map[string]attack.Sale) ([]report.Row, map[string]attack.Sale) {
	var reports []report.Row
	sales := map[string]attack.Sale{}
	for _, c := range clients {
		var (
			base *report.Row
			rows []report.Row
		)
		for _, r := range combined {
			switch {
			case r.Clients != c:
			case r.Strategy == "baseline":
				base = &r
			default:
				rows = append(rows, r)
			}
		}
		for j := range rows {
			if base != nil && base.OrdersPerSecond > 0 {
				rows[j].VsBaseline = rows[j].OrdersPerSecond / base.OrdersPerSecond
			}
			pass := slices.DeleteFunc(slices.Clone(rows), func(x report.Row) bool { return x.Pass != rows[j].Pass })
			rows[j].Goals = report.Goals(rows[j], pass, base)
			if s, ok := roundSales[max(rows[j].Round, 1)-1][rows[j].Strategy]; ok {
				sales[rows[j].Strategy] = s
			}
		}
		if bare != nil {
			if row, ok := bare.row(c); ok {
				rows = append([]report.Row{row}, rows...)
			}
		}
		if base != nil {
			rows = append([]report.Row{*base}, rows...)
		}
		reports = append(reports, rows...)
	}
	return reports, sales
}

// faultText describes the fault for the report.
func faultText(o options) string {
	if o.fault == "" {
		return ""
	}
	return fmt.Sprintf("; fault %s: during each selling phase the tool takes the lock from its holder, over and over "+
		"(Redis DEL every 1 ms, the etcd holder's key once it has held for 1 ms, the ZooKeeper holder's node every 2 ms; at most %d per sale), as a failover or an expiry under a paused holder does, "+
		"while the database answers the service %s late (a database under load)", o.fault, lockloss.MaxTakes, lockloss.DBLatency)
}

func model(o options) string {
	if len(o.clients) > 1 {
		counts := make([]string, len(o.clients))
		for i, c := range o.clients {
			counts[i] = strconv.Itoa(c)
		}
		if o.rate > 0 {
			return fmt.Sprintf("open model at %d req/s with at most %s requests in flight (the whole comparison at each)", o.rate, strings.Join(counts, ", then "))
		}
		return fmt.Sprintf("closed model with %s clients (the whole comparison at each count)", strings.Join(counts, ", then "))
	}
	if o.rate > 0 {
		return fmt.Sprintf("open model at %d req/s", o.rate)
	}
	return fmt.Sprintf("closed model with %d clients", o.concurrency)
}

func backendsText(o options) string {
	db, redis := "embedded SQLite", "embedded Redis"
	if o.mysql != "" {
		db = "MySQL/MariaDB"
	}
	if o.redis != "" {
		redis = "Redis " + o.redis
	}
	text := db + ", " + redis + ", etcd embedded in a process of its own"
	if o.zk != "" {
		text += ", ZooKeeper " + o.zk
	}
	if o.nats != "" {
		text += ", NATS JetStream " + o.nats
	}
	return text
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error on supported platforms
	return hex.EncodeToString(b)
}

// roundsText says how many times each row ran, for the report.
func roundsText(o options) string {
	if o.rounds == 1 {
		return ""
	}
	return fmt.Sprintf(" Each row %d times, interleaved: round 1 of every row (at every client count, in every pass, on fresh processes), then round 2, ..., "+
		"each round on fresh products and verified; the report gives the median of each figure with its min–max, and judges the targets on the medians.", o.rounds)
}

// storeText is the report's line on where the verdicts come from.
func storeText(o options) string {
	switch {
	case o.mysql != "":
		return "Every sale verified in the store itself: the tool reads products and orders in the -mysql database and holds the service's audit against them."
	case o.targets == "":
		return "Every sale verified in the store itself: the tool reads products and orders in the SQLite file of the processes it starts (read-only) and holds the service's audit against them."
	}
	return "The tool cannot read the targets' store (no -mysql): every sale verified from the service's own audit and orders alone."
}
