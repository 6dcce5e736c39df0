// Package runner is the load tool (cmd: loadtest): it parses the command line, starts what the
// run needs (the service processes, their etcd and ZooKeeper, the bare servers), runs the sales
// and the fault, verifies each, and writes the report.
package runner

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"golang.org/x/term"

	"github.com/flashsale/seckill/api"
	"github.com/flashsale/seckill/devserver/zkserver"
	"github.com/flashsale/seckill/loadtest/attack"
	"github.com/flashsale/seckill/loadtest/cpu"
	"github.com/flashsale/seckill/loadtest/lockloss"
	"github.com/flashsale/seckill/loadtest/proc"
	"github.com/flashsale/seckill/loadtest/report"
	"github.com/flashsale/seckill/loadtest/scrape"
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

// allStrategies are compared in this order; naive last, as the control that must be caught.
// zookeeper follows etcd when the service has a ZooKeeper (-zk).
var allStrategies = []string{"hybrid", "etcd", "pessimistic", "dblock", "naive"}

// strategies are the strategies a comparison runs.
func (o options) strategies() []string {
	if o.fault == lockloss.Name {
		return o.lockLossStrategies()
	}
	if o.zk == "" {
		return allStrategies
	}
	i := slices.Index(allStrategies, "etcd") + 1
	return slices.Insert(slices.Clone(allStrategies), i, "zookeeper")
}

type options struct {
	targets     string
	spawn       int
	token       string
	sku         string
	stock       int
	users       int
	requests    int
	rate        int
	concurrency int   // the clients of the comparison running now: one of clients
	clients     []int // -concurrency: the whole comparison runs at each count in turn
	duration    time.Duration
	timeout     time.Duration
	retryRounds int
	strategy    string
	compare     bool
	mysql       string
	redis       string
	etcd        string // when the tool starts the service: the client URL of the etcd process it started for it
	zk          string // ZooKeeper servers (SECKILL_ZK_SERVERS) of the service; "": zookeeper is not compared
	out         string
	progress    bool
	soak        time.Duration
	soldOut     time.Duration // the steady sold-out phase of each sale; 0: none
	after       afterSale     // what buyers do with their orders after the sale (-cancel, -unpaid)
	groupCommit []int         // SECKILL_GROUP_COMMIT of each pass; none: the server's default
	fault       string        // the fault injected during each selling phase (-fault); "": none
	// serviceMySQL is the DSN the service processes get when it is not -mysql: under -fault, the
	// same database through the fault's slow proxy.
	serviceMySQL string
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.targets, "target", "", "comma-separated base URLs of running instances (round-robin); empty: start the service here")
	fs.IntVar(&o.spawn, "spawn", 1, "without -target: how many service processes to start, sharing backends")
	fs.StringVar(&o.token, "token", "", "admin token of the targets (required with -target)")
	fs.StringVar(&o.sku, "sku", "", "SKU prefix of the sale (a strategy suffix is added); default: lt-<time>")
	fs.IntVar(&o.stock, "stock", 100, "units on sale")
	fs.IntVar(&o.users, "users", 1000, "distinct buyers")
	fs.IntVar(&o.requests, "requests", 0, "order requests in the first round (default: one per user; more means repeat buyers)")
	fs.IntVar(&o.rate, "rate", 0, "requests per second (open model); 0: closed model with -concurrency workers")
	concurrency := fs.String("concurrency", "64", "concurrent clients; a comma-separated list (64,512) runs the whole comparison at each count in turn")
	fs.DurationVar(&o.duration, "duration", time.Minute, "upper bound of one round of requests")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "per-request timeout")
	fs.IntVar(&o.retryRounds, "retry-busy", 3, "rounds retrying 429 busy answers after their Retry-After (0: no retries)")
	fs.StringVar(&o.strategy, "strategy", "", "strategy to run (default: the server's); see -compare")
	fs.BoolVar(&o.compare, "compare", false, "run every strategy in turn (default when the tool starts the service)")
	fs.StringVar(&o.mysql, "mysql", "", "MySQL DSN: the tool reads its tables to verify every sale (without it, against -target, only the service's audit is left), and with -compare measure the per-order FOR UPDATE baseline (when the tool starts the service, it uses this database)")
	fs.StringVar(&o.redis, "redis", "", "when the tool starts the service: Redis addresses for it (default: embedded)")
	fs.StringVar(&o.zk, "zk", "", "compare the zookeeper strategy too: the ZooKeeper host:port list for the service processes the tool starts "+
		"(with -target: any value, the targets have theirs); \"start\": start a standalone ZooKeeper here for them (Debian's zookeeper package, java)")
	fs.StringVar(&o.out, "out", "", "output folder (default: loadtest-results/<time>)")
	fs.DurationVar(&o.soak, "soak", 0, "repeat the sale (fresh product each round) for this long and check that nothing leaks; 0: one sale")
	fs.DurationVar(&o.soldOut, "soldout", 0, "after each sale sold out and was verified, order it this long with fresh buyers at -concurrency "+
		"and measure the rejections beside a bare net/http handler (default 5s with -compare; 0: off)")
	groupCommit := fs.String("group-commit", "", "when the tool starts the service: comma-separated SECKILL_GROUP_COMMIT values "+
		"(0: one order per critical section; 64: batched), one set of processes and one comparison each, in one run; empty: the server's default")
	fs.Float64Var(&o.after.cancel, "cancel", 0, "after each sale, this share of the orders is cancelled by its buyer; then fresh buyers buy the units back")
	fs.Float64Var(&o.after.unpaid, "unpaid", 0, "after each sale, this share of the orders is never paid and expires (the products get a payment timeout); the rest are paid")
	fs.DurationVar(&o.after.timeout, "payment-timeout", 0, "the products' payment timeout, whole seconds (default 20s with -unpaid, else none)")
	fs.StringVar(&o.fault, "fault", "", "when the tool starts the service, with -redis: inject this fault during each selling phase; "+
		"\""+lockloss.Name+"\": take the lock from its holder every 1-2 ms (Redis, etcd, ZooKeeper) and compare each lock strategy with its unguarded twin, "+
		"which must be caught overselling")
	fs.BoolVar(&o.progress, "progress", term.IsTerminal(int(os.Stderr.Fd())), "show a progress bar")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.groupCommit, err = parseGroupCommit(*groupCommit); err != nil {
		return o, err
	}
	if o.clients, err = parseClients(*concurrency); err != nil {
		return o, err
	}
	o.concurrency = o.clients[0]
	switch {
	case o.targets != "" && o.token == "":
		return o, errors.New("-target needs -token (the admin token: products are created and audited)")
	case o.stock < 0 || o.users < 1 || o.concurrency < 1 || o.spawn < 1:
		return o, errors.New("-stock must be >= 0; -users, -concurrency and -spawn >= 1")
	case o.compare && o.strategy != "":
		return o, errors.New("-compare runs every strategy: leave out -strategy")
	case o.targets != "" && len(o.groupCommit) > 0:
		return o, errors.New("-group-commit configures the processes the tool starts: leave out -target")
	case o.soak > 0 && len(o.groupCommit) > 1:
		return o, errors.New("-soak watches one set of processes: give -group-commit at most one value")
	case o.soak > 0 && len(o.clients) > 1:
		return o, errors.New("-soak watches one set of processes: give -concurrency one value")
	case o.soldOut < 0:
		return o, errors.New("-soldout must not be negative")
	case o.zk == zkStart && o.targets != "":
		return o, errors.New("-zk start configures the processes the tool starts: with -target, the targets have their ZooKeeper")
	case (o.strategy == "zookeeper" || o.strategy == "unguarded-zookeeper") && o.zk == "":
		return o, fmt.Errorf("-strategy %s needs -zk (the service offers it only with a ZooKeeper)", o.strategy)
	case o.fault != "" && o.fault != lockloss.Name:
		return o, fmt.Errorf("-fault: %q is not a fault the tool injects (%s, or none)", o.fault, lockloss.Name)
	case o.fault != "" && o.targets != "":
		return o, fmt.Errorf("-fault %s takes the locks in the backends of the processes the tool starts: leave out -target", o.fault)
	case o.fault != "" && o.redis == "":
		return o, fmt.Errorf("-fault %s needs -redis: the tool deletes the Redis lock keys, so the processes must share one real Redis "+
			"whose address it knows before they start", o.fault)
	case o.fault != "" && o.soak > 0:
		return o, fmt.Errorf("-fault %s renews etcd sessions and loses locks on purpose, which the soak would count as leaks: leave out -soak", o.fault)
	case o.fault != "" && o.strategy != "" && !slices.Contains(o.lockLossStrategies(), o.strategy):
		return o, fmt.Errorf("-fault %s takes the locks of %s: -strategy %s has none it takes", o.fault,
			strings.Join(o.lockLossStrategies(), ", "), o.strategy)
	case o.after.cancel < 0 || o.after.unpaid < 0 || o.after.cancel+o.after.unpaid > 1:
		return o, errors.New("-cancel and -unpaid are shares: each at least 0, together at most 1")
	case o.after.timeout < 0 || o.after.timeout%time.Second != 0 || o.after.timeout > 24*time.Hour:
		return o, errors.New("-payment-timeout is whole seconds, at most a day")
	}
	if o.after.unpaid > 0 && o.after.timeout == 0 {
		o.after.timeout = 20 * time.Second
	}
	if o.requests == 0 {
		o.requests = o.users
	}
	if o.targets == "" && o.strategy == "" {
		o.compare = true
	}
	soldOutSet := false
	fs.Visit(func(f *flag.Flag) { soldOutSet = soldOutSet || f.Name == "soldout" })
	if o.compare && !soldOutSet {
		o.soldOut = defaultSoldOut
	}
	stamp := time.Now().UTC().Format("20060102-150405")
	if o.sku == "" {
		o.sku = "lt-" + stamp
	}
	if o.out == "" {
		o.out = filepath.Join("loadtest-results", stamp)
	}
	return o, nil
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
		instances = o.spawn
		description = fmt.Sprintf("%d units, %d buyers, %d requests, %s, against %d service process(es) started by the tool (%s)%s%s.",
			o.stock, o.users, o.requests, model(o), o.spawn, backendsText(o), passesText(o), faultText(o))
	}
	description += " " + storeText(o)
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
	backends := cpu.Backends(cpu.Run{MySQL: o.mysql, Redis: o.redis, ZooKeeper: o.zk, Spawned: o.targets == "", EtcdPID: etcdPid})
	var (
		reports      []report.Row
		sales        = map[string]attack.Sale{}
		soakProblems []string
	)
	// The whole comparison at each client count in turn — the baseline, every pass on fresh
	// processes, the bare handler — so that each count's rows are judged against references
	// measured at that count.
	for _, clients := range o.clients {
		o.concurrency = clients
		var (
			base *report.Row
			rows []report.Row
		)
		for i, p := range o.passes() {
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
				if i == 0 && db != nil && o.compare {
					b, err := rr.baselineReport(ctx, db)
					if err != nil {
						return err
					}
					base = &b
				}
				rs, ss, err := rr.round(ctx, "")
				if err != nil {
					return err
				}
				for j := range rs {
					if base != nil && base.OrdersPerSecond > 0 {
						rs[j].VsBaseline = rs[j].OrdersPerSecond / base.OrdersPerSecond
					}
					rs[j].Goals = report.Goals(rs[j], rs, base)
				}
				rows = slices.Insert(rows, p.rowsAt(rows), rs...)
				maps.Copy(sales, ss)
				if o.soak > 0 {
					soakProblems, err = rr.soak(ctx, stdout)
				}
				return err
			}()
			if err != nil {
				return err
			}
		}
		if bare != nil {
			if row, ok := bare.row(clients); ok {
				rows = append([]report.Row{row}, rows...)
			}
		}
		if base != nil {
			rows = append([]report.Row{*base}, rows...)
		}
		reports = append(reports, rows...)
	}
	fmt.Fprintf(stdout, "\n%s\n\n", description)
	report.Markdown(stdout, reports)
	if err := report.Write(o.out, description, reports, sales); err != nil {
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

// parseGroupCommit reads -group-commit: comma-separated batch sizes as the service takes them
// (0 and 1 both mean one order per critical section, so only one of them may be given).
func parseGroupCommit(list string) ([]int, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var out []int
	seen := map[string]bool{}
	for _, field := range strings.Split(list, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || v < 0 {
			return nil, fmt.Errorf("-group-commit: %q is not a batch size (0: per-order, or a number of orders)", field)
		}
		label := groupCommitLabel(v)
		if seen[label] {
			return nil, fmt.Errorf("-group-commit: %s twice", label)
		}
		seen[label] = true
		out = append(out, v)
	}
	return out, nil
}

// parseClients reads -concurrency: one client count, or a comma-separated list of them, each
// at least 1 and none twice.
func parseClients(list string) ([]int, error) {
	var out []int
	for _, field := range strings.Split(list, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("-concurrency: %q is not a number of clients (at least 1)", field)
		}
		if slices.Contains(out, v) {
			return nil, fmt.Errorf("-concurrency: %d twice", v)
		}
		out = append(out, v)
	}
	return out, nil
}

// groupCommitLabel names a group commit setting in the rows it produced.
func groupCommitLabel(v int) string {
	if v <= 1 {
		return "per-order"
	}
	return fmt.Sprintf("batched %d", v)
}

// pass is one set of service processes and the comparison run on them: the run compares
// service configurations (-group-commit, pessimistic's row lock) side by side, each on
// processes of its own.
type pass struct {
	label     string           // added to the name of every row: "per-order", "batched 64"; "": the server's default
	suffix    string           // keeps the SKUs of this pass apart from the other passes'
	env       []string         // added to the service's environment
	only      string           // the one strategy the pass runs; "": every strategy of the run
	family    string           // the family of its rows, when its settings change it; "": the strategy's
	instances []*proc.Instance // the processes, while the pass runs
}

// rowLockWait is the pass that runs pessimistic's other form beside its default (NOWAIT), on
// processes of its own: it waits in the row's lock queue (SECKILL_ROW_LOCK=wait).
var rowLockWait = pass{label: "wait", suffix: "-wait", env: []string{"SECKILL_ROW_LOCK=wait"}, only: "pessimistic",
	family: "DB row lock (FOR UPDATE, waiting in the row's lock queue)"}

// comparesRowLocks reports whether the run compares pessimistic's two forms: when the tool starts
// the service on MySQL (SQLite has no row locks) and runs pessimistic, and does not soak (one set
// of processes).
func (o options) comparesRowLocks() bool {
	runs := o.strategy == "pessimistic" || o.compare && slices.Contains(o.strategies(), "pessimistic")
	return o.targets == "" && o.mysql != "" && o.soak == 0 && runs
}

// passes are the passes at the run's current client count: one per -group-commit value, or one
// with the server's default. When -concurrency lists several counts, every pass's label and
// SKUs also name its count, so that the rows of one count stay apart from the others'.
func (o options) passes() []*pass {
	out := []*pass{{}}
	if len(o.groupCommit) > 0 {
		out = nil
		for _, v := range o.groupCommit {
			out = append(out, &pass{label: groupCommitLabel(v), suffix: fmt.Sprintf("-gc%d", v),
				env: []string{fmt.Sprintf("SECKILL_GROUP_COMMIT=%d", v)}})
		}
	}
	if o.comparesRowLocks() {
		for i := len(out) - 1; i >= 0; i-- {
			w := rowLockWait
			w.label = strings.TrimSuffix(w.label+", "+out[i].label, ", ")
			w.suffix, w.env = out[i].suffix+w.suffix, append(slices.Clone(out[i].env), w.env...)
			out = slices.Insert(out, i+1, &w)
		}
	}
	if len(o.clients) > 1 {
		for _, p := range out {
			p.label = strings.TrimPrefix(fmt.Sprintf("%s, %d clients", p.label, o.concurrency), ", ")
			p.suffix += fmt.Sprintf("-c%d", o.concurrency)
		}
	}
	return out
}

// start returns the targets of the pass: the -target URLs, or (with bin, the built service) the
// URLs and process ids of the processes it starts in a folder of its own under dir.
func (p *pass) start(ctx context.Context, o options, bin, dir string, logs io.Writer) ([]string, []int, error) {
	if bin == "" {
		return strings.Split(o.targets, ","), nil, nil
	}
	env := append(serviceEnv(o), p.env...)
	dir = filepath.Join(dir, "service"+p.suffix)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	if p.label != "" {
		settings := ""
		if len(p.env) > 0 {
			settings = " (" + strings.Join(p.env, " ") + ")"
		}
		fmt.Fprintf(logs, "loadtest: pass %s%s\n", p.label, settings)
	}
	var err error
	if p.instances, err = proc.Spawn(ctx, bin, o.spawn, dir, env, logs); err != nil {
		return nil, nil, err
	}
	var targets []string
	var pids []int
	for _, inst := range p.instances {
		targets = append(targets, inst.URL)
		pids = append(pids, inst.Cmd.Process.Pid)
	}
	return targets, pids, nil
}

// store is what the verifier of the pass reads: the -mysql database, or the SQLite file that the
// pass's processes said at start they keep their store in. With -target and no -mysql it is
// nil: the tool does not know the targets' store.
func (p *pass) store(ctx context.Context, db *sql.DB, logs io.Writer) (*verify.Store, error) {
	var s *verify.Store
	switch {
	case db != nil:
		s = verify.MySQL(db)
	case len(p.instances) == 0:
		return nil, nil
	case p.instances[0].SQLite == "":
		return nil, errors.New("the service processes did not say at start where their SQLite store is, and there is no -mysql: " +
			"the tool reads the store of the processes it starts itself (if SECKILL_MYSQL_DSN is set in its environment, give it as -mysql)")
	default:
		var err error
		if s, err = verify.OpenSQLite(ctx, p.instances[0].SQLite); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(logs, "loadtest: verifying every sale in %s, and the service's audit against it\n", s.What)
	return s, nil
}

// stop stops the processes of the pass, if it started any.
func (p *pass) stop() {
	proc.Stop(p.instances)
	p.instances = nil
}

// rowsAt is where the rows of the pass go among rows, those of the passes before: at the end, or
// for a pass of one strategy beside that strategy's last row, which it is run against.
func (p *pass) rowsAt(rows []report.Row) int {
	for i := len(rows) - 1; i >= 0 && p.only != ""; i-- {
		if rows[i].Name == p.only {
			return i + 1
		}
	}
	return len(rows)
}

// passesText describes the passes for the report.
func passesText(o options) string {
	text := ""
	if len(o.groupCommit) > 0 {
		labels := make([]string, len(o.groupCommit))
		for i, v := range o.groupCommit {
			labels[i] = fmt.Sprintf("%d (%s)", v, groupCommitLabel(v))
		}
		text = ", once per SECKILL_GROUP_COMMIT value, fresh processes each: " + strings.Join(labels, ", ")
	}
	if o.comparesRowLocks() {
		text += "; pessimistic (FOR UPDATE NOWAIT by default) once more on fresh processes with " + strings.Join(rowLockWait.env, " ") +
			", its rows labelled " + rowLockWait.label
	}
	return text
}

// serviceEnv is the environment of the service processes the tool starts: its backends and its
// admin token.
func serviceEnv(o options) []string {
	var env []string
	if o.serviceMySQL != "" {
		env = append(env, "SECKILL_MYSQL_DSN="+o.serviceMySQL)
	} else if o.mysql != "" {
		env = append(env, "SECKILL_MYSQL_DSN="+o.mysql)
	}
	if o.redis != "" {
		env = append(env, "SECKILL_REDIS_ADDRS="+o.redis)
	}
	if o.etcd != "" {
		env = append(env, "SECKILL_ETCD_ENDPOINTS="+o.etcd)
	}
	if o.zk != "" {
		env = append(env, "SECKILL_ZK_SERVERS="+o.zk)
	}
	return append(env, "SECKILL_ADMIN_TOKEN="+o.token)
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
	return text
}

// putProduct starts the sale round of sku.
func putProduct(ctx context.Context, client *http.Client, base, token, sku string, stock int, paymentTimeout time.Duration) error {
	body := fmt.Sprintf(`{"name":"load test","stock":%d,"max_per_order":1,"payment_timeout_s":%d}`, stock, int(paymentTimeout/time.Second))
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/api/v1/products/"+sku, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT product %s: %d %s", sku, resp.StatusCode, raw)
	}
	return nil
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error on supported platforms
	return hex.EncodeToString(b)
}

// roundRunner runs rounds of sales: every strategy of the run, each on a fresh product.
type roundRunner struct {
	opts     options
	pass     *pass
	targets  []string
	client   *http.Client
	verifier verify.Verifier
	peaks    proc.Peaks      // of the service processes, when the tool started them
	bare     *bareServers    // nil: sold-out phases are not held against a bare handler
	fault    *lockloss.Thief // -fault lock-loss: takes the locks during each selling phase; nil: no fault
	cpu      *cpu.Meter      // the CPU time of the processes of the sale, per group
	db       dbBudget        // the database's connections, as planned before the run (-mysql)
	progress io.Writer
	log      io.Writer
}

// round sells, measures and verifies once per strategy, then (with -soldout) keeps ordering the
// sold-out product and verifies again; suffix keeps the SKUs of later rounds apart.
func (rr roundRunner) round(ctx context.Context, suffix string) ([]report.Row, map[string]attack.Sale, error) {
	o := rr.opts
	strategies := []string{o.strategy}
	switch {
	case rr.pass.only != "":
		strategies = []string{rr.pass.only}
	case o.compare:
		strategies = o.strategies()
	}
	var reports []report.Row
	sales := map[string]attack.Sale{}
	for _, strategy := range strategies {
		name := strategy
		if name == "" {
			name = "default"
		}
		row := name
		if rr.pass.label != "" {
			row = fmt.Sprintf("%s (%s)", name, rr.pass.label)
		}
		sku := o.sku + "-" + name + rr.pass.suffix + suffix
		rr.peaks.Begin()
		before, beforeErr := rr.samples(ctx)
		if err := putProduct(ctx, rr.client, rr.targets[0], o.token, sku, o.stock, o.after.timeout); err != nil {
			return nil, nil, err
		}
		l := attack.Load{Targets: rr.targets, SKU: sku, Strategy: strategy, Users: o.users, Requests: o.requests, Rate: o.rate,
			Concurrency: o.concurrency, Duration: o.duration, Timeout: o.timeout, RetryRounds: o.retryRounds, Progress: rr.progress}
		var fault *lockloss.Run
		if rr.fault != nil {
			var locks api.Locks
			if err := rr.verifier.Get(ctx, locksPath(sku), &locks); err != nil {
				return nil, nil, fmt.Errorf("%s: -fault %s: %w", row, o.fault, err)
			}
			var err error
			if fault, err = rr.fault.Start(ctx, strategy, locks); err != nil {
				return nil, nil, fmt.Errorf("%s: -fault %s: %w", row, o.fault, err)
			}
		}
		rec := rr.cpu.Start()
		s, err := l.Run(ctx, row)
		rec.Stop()
		taken, faultErr := fault.Stop()
		var (
			sold    []scrape.Sample // after the selling phase: what the fault did to a guarded strategy
			soldErr error
		)
		if fault != nil {
			sold, soldErr = rr.samples(ctx)
		}
		if err != nil {
			return nil, nil, err
		}
		if faultErr != nil {
			return nil, nil, fmt.Errorf("%s: -fault %s: %w", row, o.fault, faultErr)
		}
		faulted := ""
		if fault != nil {
			faulted = o.fault
		}
		r := report.NewRow(row, strategy, sku, s, faulted)
		r.Name, r.Pass, r.Clients = name, rr.pass.label, o.concurrency
		if rr.pass.family != "" {
			r.Family = rr.pass.family
		}
		r.CPU = &cpu.Cost{Selling: sellingCPU(rr.cpu, rec, s.Results)}
		if faulted != "" {
			r.LocksTaken = &taken
		}
		if r.Outcomes[attack.Invalid] == r.Requests {
			r.Skipped = "refused by the server (the unsafe strategies need SECKILL_ALLOW_UNSAFE=true)"
		} else {
			if o.after.on() && !r.ExpectOversell {
				if s.Acked, r.Lifecycle, l, err = rr.afterSale(ctx, l, s.Acked); err != nil {
					return nil, nil, fmt.Errorf("%s after the sale: %w", row, err)
				}
			}
			if r.Verdict, err = rr.verifier.Verify(ctx, sku, s.Acked); err != nil {
				return nil, nil, fmt.Errorf("verify %s: %w", row, err)
			}
			if o.soldOut > 0 {
				if r.Steady, err = rr.soldOut(ctx, l, r, s.Acked); err != nil {
					return nil, nil, err
				}
				r.CPU.SoldOut = r.Steady.CPU
			}
		}
		if after, err := rr.samples(ctx); err == nil && beforeErr == nil {
			// A lock that expired under a live holder (a stall longer than the TTL, its watchdog
			// late): what a short TTL costs. Informational, like memory, and so are the lock
			// times that report.html charts.
			n := int(locksLost(after) - locksLost(before))
			r.LocksLost, r.Locks = &n, scrape.NewLockTimes(strategy, before, after)
		}
		if len(rr.peaks.PIDs) > 0 {
			// Memory is informational: a process that cannot be read leaves the cell blank and
			// says why in the log, but never costs the run its verdicts.
			if r.PeakRSSMB, err = rr.peaks.Highest(); err != nil {
				fmt.Fprintf(rr.log, "loadtest: %s: %v\n", row, err)
			}
			r.PeakRSSSinceStart = rr.peaks.SinceStart
		}
		if fault != nil && !r.ExpectOversell {
			r.Bite = lockloss.NewBite(strategy, taken, before, sold, errors.Join(beforeErr, soldErr))
		}
		r.Judge()
		reports = append(reports, r)
		sales[row] = s
		fmt.Fprintf(rr.log, "loadtest: %s: %v; %s\n", row, r.Outcomes, r.VerdictText())
	}
	return reports, sales, nil
}

// afterSale has the buyers pay, cancel or leave their orders (-cancel, -unpaid), waits until the
// unpaid ones have expired, and has fresh buyers buy the units that came back, paying for
// theirs. It returns every order with the state it must end in, and the load of the resale —
// what comes next starts past its buyers.
func (rr roundRunner) afterSale(ctx context.Context, l attack.Load, acked []verify.Order) ([]verify.Order, *report.Lifecycle, attack.Load, error) {
	a := rr.opts.after
	acted, rep := a.act(ctx, rr.client, rr.targets, acked, false, 32)
	returnedIn, err := a.awaitNoPending(ctx, rr.verifier, l.SKU)
	if err != nil {
		rep.Problems = append(rep.Problems, err.Error())
	}
	rep.ReturnedIn = returnedIn
	resale := l
	resale.First, resale.Users = l.First+l.Requests, 2*(rep.Cancelled+rep.Unpaid)+64
	resale.Requests, resale.Progress = resale.Users, nil
	s, err := resale.Run(ctx, "resale")
	if err != nil {
		return nil, nil, l, err
	}
	resold, payments := a.act(ctx, rr.client, rr.targets, s.Acked, true, 32)
	rep.Resold = len(resold)
	rep.Problems = append(rep.Problems, payments.Problems...)
	fmt.Fprintf(rr.log, "loadtest: %s: after the sale %d cancelled, %d unpaid (back on sale %s after the payments), %d paid; %d resold\n",
		l.Strategy, rep.Cancelled, rep.Unpaid, returnedIn.Round(time.Millisecond), rep.Paid, rep.Resold)
	return append(acted, resold...), &rep, resale, nil
}

// locksLost sums seckill_lock_lost_total over the instances' samples.
func locksLost(samples []scrape.Sample) float64 {
	var total float64
	for _, s := range samples {
		total += s.LocksLost
	}
	return total
}

// bareSlices is how many times a sold-out phase alternates with the bare handler's.
const bareSlices = 3

// soldOut runs the steady sold-out phase on a sale that sold out and was verified, and checks
// the invariant again after it, counting any 201 of the phase as an order the store must hold.
func (rr roundRunner) soldOut(ctx context.Context, l attack.Load, r report.Row, acked []verify.Order) (*attack.Steady, error) {
	if left := r.Verdict.Audit.Stock; left != 0 {
		return &attack.Steady{Duration: rr.opts.soldOut, Skipped: fmt.Sprintf("the sale ended with stock %d left", left)}, nil
	}
	// Against a bare handler, the phase alternates with it in thirds, so that drift on a shared
	// machine (a database still flushing the sale, a collector running) weighs on both alike.
	var own, bare attack.Slices
	var use cpu.Use // over the service's slices only
	serviceSlice := func(d time.Duration) {
		rec := rr.cpu.Start()
		l.SoldOutSlice(ctx, r.Strategy, d, &own)
		rec.Stop()
		use = use.Add(rec.Whole())
	}
	if rr.bare == nil {
		serviceSlice(rr.opts.soldOut)
	} else {
		for range bareSlices {
			rr.bare.slice(ctx, rr.opts.concurrency, rr.opts.soldOut/bareSlices, &bare, rr.progress)
			serviceSlice(rr.opts.soldOut / bareSlices)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := own.Steady()
	s.CPU = rr.cpu.Phase(use, own.Answered())
	if rr.bare != nil {
		b := bare.Steady()
		rr.bare.measured(rr.opts.concurrency, b)
		if b.Throughput > 0 {
			s.Bare, s.VsBare = &b, s.Throughput/b.Throughput
		}
	}
	v, err := rr.verifier.Verify(ctx, l.SKU, append(slices.Clip(acked), s.Acked...))
	if err != nil {
		return nil, fmt.Errorf("verify %s after the sold-out phase: %w", r.Strategy, err)
	}
	s.Verdict = &v
	fmt.Fprintf(rr.log, "loadtest: %s sold out: %d requests at %.0f req/s, p99 %s ms; %v\n", r.Strategy, s.Requests, s.Throughput, report.Milliseconds(s.P99), s.Outcomes)
	return &s, nil
}

// soak repeats rounds until the soak time is up, failing on the first round that breaks the
// invariant, and compares each instance's metrics after the first round with the last: nothing
// may keep growing. It returns what grew.
func (rr roundRunner) soak(ctx context.Context, stdout io.Writer) ([]string, error) {
	rr.opts.soldOut = 0 // the soak looks for leaks round after round, not for rates: no sold-out phases
	began := time.Now()
	first, err := rr.samples(ctx)
	if err != nil {
		return nil, err
	}
	rounds := 1
	var skus []string
	for ; time.Since(began) < rr.opts.soak && ctx.Err() == nil; rounds++ {
		reports, _, err := rr.round(ctx, fmt.Sprintf("-r%d", rounds))
		if err != nil {
			return nil, err
		}
		for _, r := range reports {
			skus = append(skus, r.SKU)
			if len(r.Failed) > 0 {
				return []string{fmt.Sprintf("round %d, %s: %s", rounds, r.Strategy, strings.Join(r.Failed, "; "))}, nil
			}
		}
	}
	last, err := rr.samples(ctx)
	if err != nil {
		return nil, err
	}
	problems := soakReport(stdout, rr.targets, first, last, rounds, time.Since(began))
	if rr.opts.redis != "" {
		time.Sleep(time.Second) // let the last releases land
		n, err := leftoverLocks(ctx, rr.verifier, rr.opts.redis, skus)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			problems = append(problems, fmt.Sprintf("%d Redis lock keys left behind", n))
		}
	}
	return problems, nil
}

// samples scrapes every target's /metrics.
func (rr roundRunner) samples(ctx context.Context) ([]scrape.Sample, error) {
	var out []scrape.Sample
	for _, target := range rr.targets {
		s, err := scrape.Read(ctx, rr.client, target)
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		out = append(out, s)
	}
	return out, nil
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

// defaultSoldOut is how long the steady sold-out phase lasts with -compare unless -soldout
// says otherwise: long enough for a stable rate, short enough to run once per strategy.
const defaultSoldOut = 5 * time.Second

// sellingCPU is the cost of a sale's selling phase, recorded by rec: from its first request to its
// last sale's answer, the window its orders/s is measured over; nil without a sale.
func sellingCPU(m *cpu.Meter, rec *cpu.Recording, results []*vegeta.Result) *cpu.Phase {
	from, to, orders := attack.SellingWindow(results)
	if orders == 0 {
		return nil
	}
	return m.Phase(rec.Between(from, to), orders)
}

// lockLossStrategies are the strategies compared under -fault lock-loss: each lock beside its
// unguarded twin (zookeeper's only with -zk), and naive last, as always.
func (o options) lockLossStrategies() []string { return lockloss.Strategies(o.zk != "") }

// locksPath is the path of the service's lock keys of sku.
func locksPath(sku string) string { return "/api/v1/products/" + sku + "/locks" }
