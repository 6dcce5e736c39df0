package runner

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/flashsale/seckill/loadtest/proc"
	"github.com/flashsale/seckill/loadtest/report"
	"github.com/flashsale/seckill/loadtest/verify"
)

// pass is one set of service processes and the comparison run on them: the run compares
// service configurations (-group-commit, pessimistic's row lock) side by side, each on
// processes of its own.
type pass struct {
	label     string           // added to the name of every row: "per-order", "batched 64"; "": the server's default
	suffix    string           // keeps the SKUs of this pass apart from the other passes'
	env       []string         // added to the service's environment
	only      string           // the one strategy the pass runs; "": every strategy of the run
	family    string           // the family of its rows, when its settings change it; "": the strategy's
	watchers  int              // sale-page event streams open on each product while it sells
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
	if o.watchers > 0 {
		for i := len(out) - 1; i >= 0; i-- {
			w := *out[i]
			w.label = strings.TrimPrefix(fmt.Sprintf("%s, %d watchers", w.label, o.watchers), ", ")
			w.suffix += "-w"
			w.env = slices.Clone(w.env)
			w.watchers = o.watchers
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

// step is one pass of one round at one client count: a set of processes started, sold on
// and stopped.
type step struct {
	round   int   // from 0
	clients int   // the client count of the step (-concurrency)
	pass    *pass // its pass at that count
	first   bool  // the first pass of its round at its count: the one the baseline runs beside
}

// schedule is the order the run's steps go in: round 1 of every row — at each client count in
// turn, every pass of it — then round 2 of every row, and so on, so that drift on a shared
// machine weighs on every row alike. Each count's rows are judged against references measured
// at that count (the baseline beside its first pass, the bare handler beside each sold-out
// phase).
func (o options) schedule() []step {
	var out []step
	for k := range o.rounds {
		for _, c := range o.clients {
			o.concurrency = c
			for i, p := range o.passes() {
				out = append(out, step{round: k, clients: c, pass: p, first: i == 0})
			}
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
	if o.watchers > 0 {
		text += fmt.Sprintf("; each pass once more on fresh processes with %d sale-page watchers (event streams) open on each product while it sells, "+
			"its rows labelled %d watchers", o.watchers, o.watchers)
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
	if o.nats != "" {
		env = append(env, "SECKILL_NATS_URLS="+o.nats)
	}
	return append(env, "SECKILL_ADMIN_TOKEN="+o.token)
}
