package runner

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/flashsale/seckill/loadtest/lockloss"
)

// allStrategies are compared in this order; naive last, as the control that must be caught.
// zookeeper follows etcd when the service has a ZooKeeper (-zk). queued follows hybrid, whose
// admission it shares: the two rows side by side are the lock against the queue.
var allStrategies = []string{"hybrid", "queued", "etcd", "pessimistic", "dblock", "naive"}

// strategies are the strategies a comparison runs.
func (o options) strategies() []string {
	if o.fault == lockloss.Name {
		return o.lockLossStrategies()
	}
	out := slices.Clone(allStrategies)
	if o.noQueue != "" {
		out = slices.DeleteFunc(out, func(s string) bool { return s == "queued" })
	}
	if o.zk == "" {
		return out
	}
	return slices.Insert(out, slices.Index(out, "etcd")+1, "zookeeper")
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
	rounds      int // -rounds: how many times each row runs, interleaved
	strategy    string
	compare     bool
	mysql       string
	redis       string
	etcd        string // when the tool starts the service: the client URL of the etcd process it started for it
	zk          string // ZooKeeper servers (SECKILL_ZK_SERVERS) of the service; "": zookeeper is not compared
	nats        string // NATS URLs (SECKILL_NATS_URLS) of the service processes the tool starts; "": each embeds its own
	noQueue     string // why queued is not compared ("": it is)
	out         string
	progress    bool
	soak        time.Duration
	soldOut     time.Duration // the steady sold-out phase of each sale; 0: none
	after       afterSale     // what buyers do with their orders after the sale (-cancel, -unpaid)
	groupCommit []int         // SECKILL_GROUP_COMMIT of each pass; none: the server's default
	fault       string        // the fault injected during each selling phase (-fault); "": none
	// checkoutLines: after each strategy's sale, a sale of checkouts of this many products (one
	// unit each) with the same stock and buyers; 0: none.
	checkoutLines int
	// waitingRoom: instead of the comparison, the waiting-room row: buyers with signed tokens
	// through a waiting room admitting this many a second, beside the same crowd with no door;
	// 0: none.
	waitingRoom int
	// watchers: each pass runs once more, on fresh processes, with this many sale-page event
	// streams open on each product while it sells; 0: none.
	watchers int
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
	fs.IntVar(&o.rounds, "rounds", 0, "run each row this many times, interleaved (round 1 of every row, then round 2, ...), each on a fresh product and verified, "+
		"and report the median with min-max of each figure (default 3 with -compare, 1 for one strategy and with -soak)")
	fs.StringVar(&o.strategy, "strategy", "", "strategy to run (default: the server's); see -compare")
	fs.BoolVar(&o.compare, "compare", false, "run every strategy in turn (default when the tool starts the service)")
	fs.StringVar(&o.mysql, "mysql", "", "MySQL DSN: the tool reads its tables to verify every sale (without it, against -target, only the service's audit is left), and with -compare measure the per-order FOR UPDATE baseline (when the tool starts the service, it uses this database)")
	fs.StringVar(&o.redis, "redis", "", "when the tool starts the service: Redis addresses for it (default: embedded)")
	fs.StringVar(&o.zk, "zk", "", "compare the zookeeper strategy too: the ZooKeeper host:port list for the service processes the tool starts "+
		"(with -target: any value, the targets have theirs); \"start\": start a standalone ZooKeeper here for them (Debian's zookeeper package, java)")
	fs.StringVar(&o.nats, "nats", "", "when the tool starts the service: the NATS JetStream URLs for it, the queue of the queued strategy "+
		"(default: the tool starts a nats-server here for them, built at the version the service embeds; without one, queued is compared only on a single process, which embeds its own)")
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
	fs.IntVar(&o.checkoutLines, "checkout-lines", 2, "after each strategy's sale, sell the same stock again as checkouts of this many products "+
		"(POST /api/v1/checkouts, one unit of each), verified per product and every checkout whole; 0: no checkout rows")
	fs.IntVar(&o.waitingRoom, "waiting-room", 0, "instead of the comparison: start the processes with buyer identity on (a key the tool makes, a token it signs per buyer), "+
		"run -users buyers through a waiting room admitting this many a second (join, poll, order with the pass) for -stock units, "+
		"then the same crowd at a product with no door; 0: off")
	fs.IntVar(&o.watchers, "watchers", 0, "run each pass again on fresh processes with this many sale-page watchers (event streams, spread over the "+
		"instances) open on each product while it sells, its rows labelled \"N watchers\": orders/s with and without them; 0: none")
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
	case o.soak > 0 && o.rounds > 1:
		return o, errors.New("-soak repeats the sale itself: leave out -rounds")
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
	case o.checkoutLines == 1 || o.checkoutLines < 0 || o.checkoutLines > 20:
		return o, errors.New("-checkout-lines is 0 (none) or 2 to 20 (the lines of a checkout)")
	case o.waitingRoom < 0 || o.waitingRoom > 100000:
		return o, errors.New("-waiting-room is admissions a second, 1 to 100000 (0: off)")
	case o.waitingRoom > 0 && o.targets != "":
		return o, errNoWaitingRoomTarget
	case o.waitingRoom > 0 && (o.fault != "" || o.soak > 0 || o.after.on() || len(o.groupCommit) > 1 || len(o.clients) > 1):
		return o, errors.New("-waiting-room is a row of its own: leave out -fault, -soak, -cancel, -unpaid, and give one -group-commit and one -concurrency")
	case o.watchers < 0 || o.watchers > 10000:
		return o, errors.New("-watchers is 0 (none) to 10000 (each instance takes 10,000 streams by default)")
	case o.watchers > 0 && o.waitingRoom > 0:
		return o, errors.New("-watchers runs beside the comparison, not the waiting-room row")
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
	soldOutSet, roundsSet := false, false
	fs.Visit(func(f *flag.Flag) {
		soldOutSet = soldOutSet || f.Name == "soldout"
		roundsSet = roundsSet || f.Name == "rounds"
	})
	if roundsSet && o.rounds < 1 {
		return o, errors.New("-rounds must be at least 1")
	}
	if o.compare && !soldOutSet {
		o.soldOut = defaultSoldOut
	}
	if o.rounds == 0 {
		o.rounds = 1
		if o.compare && o.soak == 0 {
			o.rounds = defaultRounds
		}
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

// defaultSoldOut is how long the steady sold-out phase lasts with -compare unless -soldout
// says otherwise: long enough for a stable rate, short enough to run once per strategy.
const defaultSoldOut = 5 * time.Second

// defaultRounds is how many rounds a comparison runs unless -rounds says otherwise: the fewest
// with a median that one slow or fast round does not move. A run of one strategy has no other
// row whose ratio the spread could blur: it is a check of one deployment, and one verified sale
// answers it.
const defaultRounds = 3

// roundSuffix keeps the SKUs of round k (from 0) apart from the other rounds'; "" in a run of
// one round, whose SKUs are as they always were.
func (o options) roundSuffix(k int) string {
	if o.rounds == 1 {
		return ""
	}
	return fmt.Sprintf("-r%d", k+1)
}

// lockLossStrategies are the strategies compared under -fault lock-loss: each lock beside its
// unguarded twin (zookeeper's only with -zk), and naive last, as always.
func (o options) lockLossStrategies() []string { return lockloss.Strategies(o.zk != "") }
