package runner

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/flashsale/seckill/devserver/natsserver"
	"github.com/flashsale/seckill/devserver/zkserver"
	"github.com/flashsale/seckill/loadtest/attack"
	"github.com/flashsale/seckill/loadtest/lockloss"
	"github.com/flashsale/seckill/loadtest/report"
	"github.com/flashsale/seckill/loadtest/verify"
)

// TestMain lets the test binary stand in for the tool's when it re-executes itself as a bare
// server or as the services' etcd: under go test, os.Executable is the test binary.
func TestMain(m *testing.M) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	served, err := ServeReexecuted(ctx)
	stop()
	if served {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func errBody(code string) string { return `{"error":{"code":"` + code + `","message":"m"}}` }

// TestParseFault: -fault lock-loss runs only where the tool can reach the locks — processes it
// starts, on a Redis it knows — and compares each lock with its unguarded twin, naive last.
func TestParseFault(t *testing.T) {
	o, err := parse([]string{"-fault", "lock-loss", "-redis", "127.0.0.1:6379"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"hybrid", "unguarded-redis", "etcd", "unguarded-etcd", "naive"}, o.strategies())
	o, err = parse([]string{"-fault", "lock-loss", "-redis", "127.0.0.1:6379", "-zk", "start"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"hybrid", "unguarded-redis", "etcd", "unguarded-etcd", "zookeeper", "unguarded-zookeeper", "naive"}, o.strategies())
	_, err = parse([]string{"-fault", "lock-loss", "-redis", "127.0.0.1:6379", "-strategy", "unguarded-redis"}, io.Discard)
	assert.NoError(t, err, "one strategy under the fault")

	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"unknown fault", []string{"-fault", "partition", "-redis", "r:6379"}, `"partition" is not a fault`},
		{"with -target", []string{"-target", "http://x", "-token", "t", "-fault", "lock-loss", "-redis", "r:6379"}, "leave out -target"},
		{"without -redis", []string{"-fault", "lock-loss"}, "needs -redis"},
		{"with -soak", []string{"-fault", "lock-loss", "-redis", "r:6379", "-soak", "1m"}, "leave out -soak"},
		{"a strategy it has no lock of", []string{"-fault", "lock-loss", "-redis", "r:6379", "-strategy", "pessimistic"}, "-strategy pessimistic has none"},
		{"unguarded-zookeeper without -zk", []string{"-strategy", "unguarded-zookeeper"}, "needs -zk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(tc.args, io.Discard)
			assert.ErrorContains(t, err, tc.err)
		})
	}
}

// backends finds the test backends the way the service's tests do, without importing them (the
// load tool is a black box): MariaDB and Redis when reachable, required when
// SECKILL_TEST_REQUIRE_BACKENDS=1; otherwise the service's embedded ones.
func backends(t *testing.T) (mysqlDSN, redisAddr string) {
	t.Helper()
	required := os.Getenv("SECKILL_TEST_REQUIRE_BACKENDS") == "1"
	server := os.Getenv("SECKILL_TEST_MYSQL_DSN")
	if server == "" {
		server = "root:@tcp(127.0.0.1:3306)/"
	}
	cfg, err := mysql.ParseDSN(server)
	require.NoError(t, err)
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.Ping(); err == nil {
		name := fmt.Sprintf("seckill_loadtest_%d", os.Getpid())
		_, err := admin.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS `" + name + "`") })
		cfg.DBName, cfg.ParseTime = name, true
		mysqlDSN = cfg.FormatDSN()
	} else if required {
		t.Fatalf("MariaDB is required (SECKILL_TEST_REQUIRE_BACKENDS=1): %v", err)
	}
	return mysqlDSN, testRedis(t)
}

// testRedis is the test Redis's address when it answers, required with
// SECKILL_TEST_REQUIRE_BACKENDS=1; "" otherwise.
func testRedis(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("SECKILL_TEST_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		if os.Getenv("SECKILL_TEST_REQUIRE_BACKENDS") == "1" {
			t.Fatalf("Redis is required (SECKILL_TEST_REQUIRE_BACKENDS=1): %v", err)
		}
		return ""
	}
	return addr
}

// smoke runs the tool on three service processes it starts on the test backends, with args,
// and returns what it printed; the tool must succeed.
func smoke(t *testing.T, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the service and runs three processes; skipped with -short")
	}
	dsn, redisAddr := backends(t)
	args = append(args, "-spawn", "3", "-out", t.TempDir(), "-progress=false")
	if dsn != "" {
		args = append(args, "-mysql", dsn)
	}
	if redisAddr != "" {
		args = append(args, "-redis", redisAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	var out strings.Builder
	err := Run(ctx, args, &out, testWriter{t})
	t.Log("\n" + out.String())
	require.NoError(t, err)
	return out.String()
}

// TestSmokeCompare is the CI smoke test of the tool: three service processes on one database,
// Redis and etcd — and a ZooKeeper the tool starts (-zk start) where one can run — every
// strategy compared with small numbers, in two interleaved rounds. It passes only if every safe
// strategy kept the invariant (in the audit, every order, and SQL) in every round and naive was
// caught overselling; the report gives the medians with their min–max, and each row's ceiling.
func TestSmokeCompare(t *testing.T) {
	args := []string{"-compare", "-stock", "30", "-users", "120", "-concurrency", "16", "-retry-busy", "5", "-soldout", "300ms", "-rounds", "2"}
	o := options{}
	if err := zkserver.Available(); err == nil || os.Getenv("SECKILL_TEST_REQUIRE_BACKENDS") == "1" {
		args, o.zk = append(args, "-zk", zkStart), zkStart
	} else {
		t.Logf("compared without zookeeper: %v", err)
	}
	out := smoke(t, args...)
	for _, s := range o.strategies() {
		assert.Contains(t, out, "`"+s+"`")
	}
	assert.Contains(t, out, "caught as expected")
	assert.Contains(t, out, "`"+report.BareRow+"`", "the bare handler was measured")
	assert.Contains(t, out, "Sold-out phase")
	assert.Contains(t, out, "Queued orders: the sale was answered 202", "the queued row's figures: accepted/s, placed/s, the time to the final state")
	assert.Contains(t, out, "Targets at 16 clients, judged against those stated at 64")
	assert.Contains(t, out, "CPU seconds per 1000 orders")
	assert.Contains(t, out, "CPU seconds per 1000 answers")
	assert.Contains(t, out, "Each row ran 2 times, interleaved")
	assert.Regexp(t, "(?m)^\\| `hybrid` \\| [^|]+ \\| [0-9]+ \\| [0-9]+ \\([0-9]+–[0-9]+\\) \\|", out, "hybrid's orders/s: the median with its min–max")
	assert.Contains(t, out, "| ceiling orders/s | reached | waits on |")
	assert.Regexp(t, "(?m)^Measured by `go run ./loadtest -compare .*` at commit \\S+ on [0-9]+ cores, ", out, "the provenance line heads the report")
	if strings.Contains(out, "MySQL/MariaDB") {
		assert.Contains(t, out, "`pessimistic (wait)`", "on MySQL: pessimistic's waiting form beside its default")
	}
	assert.Contains(t, out, "Every sale verified in the store itself", "the tool read the tables, and held every audit against them")
	assert.Contains(t, out, "Checkouts: the same sale, every request a checkout", "the checkouts table")
	assert.Regexp(t, "(?m)^\\| `hybrid, 2-line checkout` \\| 2 \\| [0-9]+ \\| [0-9]+ .*\\| invariant holds \\|$", out,
		"hybrid's checkouts beside its orders, whole and verified")
}

// TestSmokeQueued: the queued row on three processes sharing one NATS server the tool starts:
// every 202 followed to its final state, the queue's figures in their table, every 202 ended
// (none still queued in the audit) and the invariant held, through the sold-out phase too.
func TestSmokeQueued(t *testing.T) {
	if err := natsserver.Available(); err != nil && os.Getenv("SECKILL_TEST_REQUIRE_BACKENDS") != "1" {
		t.Skipf("the queued row needs one queue for its processes: %v", err)
	}
	out := smoke(t, "-strategy", "queued", "-stock", "30", "-users", "120", "-concurrency", "16", "-soldout", "1s", "-rounds", "1")
	assert.Contains(t, out, "Queued orders: the sale was answered 202")
	row := regexp.MustCompile("(?m)^\\| `queued` \\| ([0-9]+) \\| [0-9]+ \\| ([0-9]+) \\| [0-9]+ \\| ([0-9]+) \\| [0-9.]+ / [0-9.]+ \\| ([0-9]+) \\|$").FindStringSubmatch(out)
	require.NotNil(t, row, "the queue table has the queued row")
	assert.Equal(t, "30", row[2], "every unit placed through the queue")
	assert.Equal(t, "0", row[4], "every 202 ended")
	assert.Regexp(t, "(?m)^\\| `queued` \\|.*\\| invariant holds \\|$", out, "the queued row's verdict")
	assert.Contains(t, out, "NATS JetStream nats://127.0.0.1:", "the processes shared the queue the tool started")
}

// TestSmokeLockLoss: the tool on three processes with -fault lock-loss, taking each sale's lock
// from its holder every millisecond or two while it sells. Every unguarded strategy — the lock
// alone — must be caught overselling, every guarded one must keep the invariant with the same
// lock failing under it: the version check and the fencing tokens are what hold, not the lock.
func TestSmokeLockLoss(t *testing.T) {
	args := []string{"-fault", lockloss.Name, "-stock", "100", "-users", "400", "-concurrency", "32", "-retry-busy", "5", "-soldout", "0", "-rounds", "1"}
	o := options{fault: lockloss.Name}
	if err := zkserver.Available(); err == nil || os.Getenv("SECKILL_TEST_REQUIRE_BACKENDS") == "1" {
		args, o.zk = append(args, "-zk", zkStart), zkStart
	} else {
		t.Logf("without zookeeper: %v", err)
	}
	if testRedis(t) == "" {
		t.Skip("-fault lock-loss needs a real Redis")
	}
	out := smoke(t, args...)
	// A guarded row shows that the fault bit: locks taken from a holder, lock acquisitions, and its
	// guard at work (the guard's counter and the locks lost), each counted over its sale.
	bit := regexp.MustCompile(`invariant holds under lock-loss \((\d+) locks taken from a holder; (\d+) lock acquisitions, (\d+) (?:optimistic retries|writes fenced out), (\d+) locks lost\)`)
	for _, s := range o.strategies() {
		if lockloss.MustOversell(s, lockloss.Name) {
			assert.Regexp(t, "(?m)^\\| `"+s+"` \\|.*caught as expected", out, s)
			continue
		}
		row := regexp.MustCompile("(?m)^\\| `" + s + "` \\|.*$").FindString(out)
		m := bit.FindStringSubmatch(row)
		if !assert.NotNil(t, m, "%s's row says what the fault did to it: %s", s, row) {
			continue
		}
		t.Logf("%s: %s", s, m[0])
		n := func(i int) int {
			v, err := strconv.Atoi(m[i])
			require.NoError(t, err)
			return v
		}
		assert.Positive(t, n(1), "%s: the thief took its lock from a holder", s)
		assert.Positive(t, n(2), "%s locked", s)
		assert.Positive(t, n(3)+n(4), "%s's guard acted", s)
	}
}

// TestSmokeLifecycle: the tool on three processes with -cancel and -unpaid — a share of the
// orders cancelled, a share left to expire, the rest paid, fresh buyers buying the units back —
// verifies every order's state and the invariant, and fails nothing.
func TestSmokeLifecycle(t *testing.T) {
	out := smoke(t, "-strategy", "hybrid", "-stock", "60", "-users", "200", "-concurrency", "16", "-retry-busy", "5",
		"-cancel", "0.25", "-unpaid", "0.25", "-payment-timeout", "2s", "-soldout", "1s")
	assert.Contains(t, out, "After the sale")
	assert.Regexp(t, "`hybrid` \\| [1-9][0-9]* \\| [1-9][0-9]* \\| [1-9][0-9]* \\|", out, "cancels, expiries and payments all happened")
}

// TestDefaultRun is the README's load test as a newcomer runs it: from the module root, with
// nothing configured (no SECKILL_ variable), the tool builds cmd/api, starts one process of it on
// the embedded default — SQLite, in-process Redis, embedded etcd — and compares every strategy,
// each with its 2-line checkout row. It must exit 0: every safe strategy holds the invariant, in
// its orders and its checkouts, and naive is caught overselling in both, so that on the default
// too the checks are seen to fail where they should. It runs one round with
// a 1 s sold-out phase (defaultRunArgs) where the bare command runs three with 5 s: the rounds
// repeat the same sales, and TestDefaultRunArgs holds that nothing else differs.
func TestDefaultRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tool and the service and runs the default comparison (one round, about a minute); skipped with -short")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "loadtest")
	build := exec.Command("go", "build", "-o", bin, "./loadtest")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build the tool: %s", out)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, defaultRunArgs...)
	cmd.Dir = root // where the README runs it: the tool builds cmd/api from the module
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "SECKILL_") || strings.HasPrefix(kv, "LOADTEST_")
	})
	// Out of time, the tool is interrupted as at a terminal, and stops the processes it started.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err = cmd.Run()
	took := time.Since(began)
	// The report goes where a newcomer's would, loadtest-results/<time> (ignored by git): the
	// test removes it, and the folder if it made it.
	if m := regexp.MustCompile(`(?m)^report: (\S+) `).FindStringSubmatch(stdout.String()); m != nil {
		t.Cleanup(func() {
			_ = os.RemoveAll(filepath.Join(root, m[1]))
			_ = os.Remove(filepath.Join(root, filepath.Dir(m[1])))
		})
	}

	verdicts := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^loadtest: (\S+): map\[[^\]]*\]; (.+)$`).FindAllStringSubmatch(stderr.String(), -1) {
		verdicts[m[1]] = m[2]
	}
	t.Logf("the tool with %v and nothing configured: %s after %s", defaultRunArgs, exitText(err), took.Round(time.Second))
	for _, s := range allStrategies {
		t.Logf("%-11s %s", s, verdicts[s])
		want := "invariant holds"
		if lockloss.MustOversell(s, "") {
			want = "oversold by [1-9][0-9]*, caught as expected"
		}
		assert.Regexp(t, "^"+want+"$", verdicts[s], "%s's verdict", s)
		assert.Regexp(t, "(?m)^\\| `"+s+"` \\|.*\\| "+want+" \\|$", stdout.String(), "%s's row", s)
		assert.Regexp(t, "(?m)^\\| `"+s+", 2-line checkout` \\| 2 \\|.*\\| "+want+" \\|$", stdout.String(),
			"%s's checkouts, verified per product and whole", s)
	}
	assert.Contains(t, stdout.String(), "the tool reads products and orders in the SQLite file of the processes it starts (read-only)")
	assert.Regexp(t, `(?m)^loadtest: verifying every sale in the SQLite file \S+/seckill\.db, read-only`, stderr.String(),
		"the store the process said it opened")
	if t.Failed() || err != nil {
		t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	require.NoError(t, err, "the default run must exit 0")
}

// defaultRunArgs are all TestDefaultRun adds to the bare command: one round instead of three,
// and a 1 s sold-out phase instead of 5 s (as TestSmokeCompare's). Three rounds of every
// strategy took about three minutes of the serial lane and ran no code that one round does not.
var defaultRunArgs = []string{"-rounds", "1", "-soldout", "1s"}

// exitText is how a finished process ended: its exit status, or why it has none.
func exitText(err error) string {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return "exit status 0"
	case errors.As(err, &exit):
		return exit.String()
	}
	return err.Error()
}

// testWriter sends the tool's log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestBareHandler: the bare reference answers exactly the contract's sold_out error, and the tool
// classifies it as the service's.
func TestBareHandler(t *testing.T) {
	srv := httptest.NewServer(bareHandler())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/api/v1/products/lt-1/orders?lt=7", "application/json", strings.NewReader(`{"user_id":"u-1","quantity":1}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.JSONEq(t, `{"error":{"code":"sold_out","message":"product lt-1 is sold out"}}`, string(raw))
	assert.Equal(t, attack.SoldOut, attack.Classify(&vegeta.Result{Code: uint16(resp.StatusCode), Body: raw}))

	err = serveBare(context.Background(), "0.0.0.0:0", io.Discard)
	assert.ErrorContains(t, err, "loopback", "the bare server never listens beyond this machine")
}

// TestMeasureBare: the tool re-executes itself as bare servers, attacks them like a sold-out
// phase in slices (fresh buyers in each), reports the median measurement as the bare row, and
// stops them.
func TestMeasureBare(t *testing.T) {
	o := options{sku: "lt-bare", users: 10, requests: 10, concurrency: 8, timeout: 5 * time.Second, soldOut: 300 * time.Millisecond}
	b, err := startBare(context.Background(), o, 2, t.TempDir(), testWriter{t})
	require.NoError(t, err)
	defer b.stop()
	_, ok := b.row(8)
	assert.False(t, ok, "no row before a measurement")
	for range 3 {
		var p attack.Slices
		for range 2 {
			b.slice(context.Background(), 8, 150*time.Millisecond, &p, nil)
		}
		s := p.Steady()
		b.measured(8, s)
		assert.Positive(t, s.Requests)
		assert.Equal(t, s.Requests, s.Outcomes[attack.SoldOut], "every answer is 409 sold_out: %v", s.Outcomes)
		assert.Positive(t, s.Throughput)
	}
	r, ok := b.row(8)
	require.True(t, ok)
	assert.Equal(t, report.BareRow, r.Strategy)
	assert.Equal(t, 8, r.Clients)
	rates := []float64{b.all[8][0].Throughput, b.all[8][1].Throughput, b.all[8][2].Throughput}
	slices.Sort(rates)
	assert.Equal(t, rates[1], r.Steady.Throughput, "the median measurement")
	_, ok = b.row(16)
	assert.False(t, ok, "each client count has its own bare row")
}

// TestSoldOutPhase: the steady phase sends fresh buyers with fresh keys, counts every answer by
// kind, and a 201 there fails the run for a safe strategy (it is a unit that does not exist) but
// not for naive.
func TestSoldOutPhase(t *testing.T) {
	var mu sync.Mutex
	users, keys := map[string]bool{}, map[string]bool{}
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			UserID string `json:"user_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		assert.False(t, users[body.UserID], "buyer %s sent twice", body.UserID)
		assert.False(t, keys[r.Header.Get("Idempotency-Key")], "key sent twice")
		users[body.UserID], keys[r.Header.Get("Idempotency-Key")] = true, true
		n++
		i := n
		mu.Unlock()
		switch i % 4 {
		case 0:
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"order_id":"o%d","user_id":%q}`, i, body.UserID)
		case 1:
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, errBody("busy"))
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, errBody("unavailable"))
		default:
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, errBody("sold_out"))
		}
	}))
	defer srv.Close()
	l := attack.Load{Targets: []string{srv.URL}, SKU: "lt-s", Strategy: "hybrid", Users: 5, Requests: 5, Rate: 50, Concurrency: 4, Timeout: 5 * time.Second}
	var p attack.Slices // in two slices, as beside the bare handler: buyers stay new across them
	l.SoldOutSlice(context.Background(), "hybrid", 100*time.Millisecond, &p)
	l.SoldOutSlice(context.Background(), "hybrid", 100*time.Millisecond, &p)
	s := p.Steady()
	require.Positive(t, s.Requests)
	assert.Equal(t, 200*time.Millisecond, s.Duration)
	assert.Equal(t, s.Outcomes[attack.OK], len(s.Acked), "every 201 of the phase is kept for the verifier")
	assert.Positive(t, s.Outcomes[attack.OK])
	assert.Positive(t, s.TooMany)
	assert.Positive(t, s.Server)
	assert.Positive(t, s.Outcomes[attack.SoldOut])
	assert.Zero(t, s.Unexpected())
	assert.Greater(t, s.Requests, 50/5, "the closed model, not -rate: the phase measures capacity")

	safe := report.Row{Strategy: "hybrid", Outcomes: map[string]int{attack.OK: 5}, Steady: &s}
	safe.Judge()
	assert.Contains(t, strings.Join(safe.Failed, "; "), "201 in the sold-out phase")
	naive := report.Row{Strategy: "naive", ExpectOversell: true, Outcomes: map[string]int{attack.OK: 9}, Verdict: verify.Verdict{Oversold: 4}, Steady: &s}
	naive.Judge()
	assert.Empty(t, naive.Failed)
}

func TestParseGroupCommit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		err  string
	}{
		{"", nil, ""},
		{"64", []int{64}, ""},
		{"0,64", []int{0, 64}, ""},
		{" 0 , 8, 64 ", []int{0, 8, 64}, ""},
		{"-1", nil, "not a batch size"},
		{"x", nil, "not a batch size"},
		{"0,", nil, "not a batch size"},
		{"0,1", nil, "per-order twice"},
		{"64,64", nil, "batched 64 twice"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseGroupCommit(tc.in)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	assert.Equal(t, "per-order", groupCommitLabel(0))
	assert.Equal(t, "batched 64", groupCommitLabel(64))

	o, err := parse([]string{"-group-commit", "0,64"}, io.Discard)
	require.NoError(t, err)
	passes := o.passes()
	require.Len(t, passes, 2)
	assert.Equal(t, []string{"SECKILL_GROUP_COMMIT=0"}, passes[0].env)
	assert.Equal(t, "batched 64", passes[1].label)
	assert.NotEqual(t, passes[0].suffix, passes[1].suffix, "fresh SKUs per value")
	assert.Equal(t, defaultSoldOut, o.soldOut, "comparing: a sold-out phase by default")
	o, err = parse(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []*pass{{}}, o.passes(), "no list: one pass on the server's default")

	for name, args := range map[string][]string{
		"with -target":       {"-target", "http://x", "-token", "t", "-group-commit", "0"},
		"soak over two sets": {"-soak", "1m", "-group-commit", "0,64"},
		"negative soldout":   {"-soldout", "-1s"},
		"a 1-line checkout":  {"-checkout-lines", "1"},
		"21 lines":           {"-checkout-lines", "21"},
	} {
		_, err := parse(args, io.Discard)
		assert.Error(t, err, name)
	}
	o, err = parse([]string{"-target", "http://x", "-token", "t", "-strategy", "hybrid"}, io.Discard)
	require.NoError(t, err)
	assert.Zero(t, o.soldOut, "one strategy: no sold-out phase unless asked")
	o, err = parse([]string{"-soldout", "0"}, io.Discard)
	require.NoError(t, err)
	assert.Zero(t, o.soldOut, "0 turns it off")
	assert.Equal(t, 2, o.checkoutLines, "a 2-line checkout row beside each strategy by default")
}

// TestRowLockPasses: when the tool starts the service on MySQL and runs pessimistic, each pass
// is followed by one of pessimistic alone on processes with SECKILL_ROW_LOCK=wait, whose rows go
// beside pessimistic's of the pass before; not on SQLite, against -target, without pessimistic,
// or in a soak.
func TestRowLockPasses(t *testing.T) {
	const dsn = "root:@tcp(127.0.0.1:3306)/seckill_lt"
	o, err := parse([]string{"-mysql", dsn, "-group-commit", "0,64"}, io.Discard)
	require.NoError(t, err)
	passes := o.passes()
	var labels []string
	for _, p := range passes {
		labels = append(labels, p.label)
	}
	assert.Equal(t, []string{"per-order", "wait, per-order", "batched 64", "wait, batched 64"}, labels)
	assert.Equal(t, []string{"SECKILL_GROUP_COMMIT=64", "SECKILL_ROW_LOCK=wait"}, passes[3].env)
	assert.Equal(t, "-gc64-wait", passes[3].suffix)
	assert.Equal(t, "pessimistic", passes[3].only)
	assert.Empty(t, passes[2].only, "the other passes run every strategy")
	assert.Equal(t, []string{"SECKILL_ROW_LOCK=wait"}, rowLockWait.env, "the pass template is left as it was")
	assert.Contains(t, passesText(o), "with SECKILL_ROW_LOCK=wait")

	o, err = parse([]string{"-mysql", dsn, "-strategy", "pessimistic"}, io.Discard)
	require.NoError(t, err)
	passes = o.passes()
	require.Len(t, passes, 2)
	assert.Equal(t, "wait", passes[1].label, "rows pessimistic and pessimistic (wait)")
	rows := []report.Row{{Name: "hybrid"}, {Name: "pessimistic"}, {Name: "naive"}}
	assert.Equal(t, 2, passes[1].rowsAt(rows), "beside pessimistic")
	assert.Equal(t, 3, passes[0].rowsAt(rows), "at the end")

	for name, args := range map[string][]string{
		"SQLite":          nil,
		"with -target":    {"-target", "http://x", "-token", "t", "-mysql", dsn, "-strategy", "pessimistic"},
		"no pessimistic":  {"-mysql", dsn, "-strategy", "hybrid"},
		"soak":            {"-mysql", dsn, "-soak", "1m"},
		"lock-loss fault": {"-mysql", dsn, "-redis", "127.0.0.1:6379", "-fault", lockloss.Name},
	} {
		o, err := parse(args, io.Discard)
		require.NoError(t, err, name)
		assert.Len(t, o.passes(), 1, name)
		assert.NotContains(t, passesText(o), "SECKILL_ROW_LOCK", name)
	}
}

// TestParseClients: -concurrency takes one count or a list; with a list the whole comparison
// repeats at each count, every pass's rows and SKUs naming its count.
func TestParseClients(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		err  string
	}{
		{"64", []int{64}, ""},
		{"64,512", []int{64, 512}, ""},
		{" 512 , 64 ", []int{512, 64}, ""},
		{"", nil, "not a number of clients"},
		{"0", nil, "not a number of clients"},
		{"64,", nil, "not a number of clients"},
		{"64,x", nil, "not a number of clients"},
		{"64,64", nil, "64 twice"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseClients(tc.in)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}

	o, err := parse([]string{"-concurrency", "64,512", "-group-commit", "0,64"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []int{64, 512}, o.clients)
	assert.Equal(t, 64, o.concurrency, "the first count runs first")
	assert.Contains(t, model(o), "closed model with 64, then 512 clients")
	o.concurrency = 512
	passes := o.passes()
	require.Len(t, passes, 2)
	assert.Equal(t, "per-order, 512 clients", passes[0].label)
	assert.Equal(t, "batched 64, 512 clients", passes[1].label)
	assert.Equal(t, "-gc64-c512", passes[1].suffix)
	assert.Equal(t, []string{"SECKILL_GROUP_COMMIT=64"}, passes[1].env)

	o, err = parse([]string{"-concurrency", "64,512"}, io.Discard)
	require.NoError(t, err)
	passes = o.passes()
	require.Len(t, passes, 1)
	assert.Equal(t, "64 clients", passes[0].label, "no group commit list: the count alone")
	assert.Equal(t, "-c64", passes[0].suffix)

	o, err = parse([]string{"-concurrency", "32"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []*pass{{}}, o.passes(), "one count: the rows are named as before")
	assert.Equal(t, "closed model with 32 clients", model(o))

	_, err = parse([]string{"-concurrency", "64,512", "-soak", "1m"}, io.Discard)
	assert.ErrorContains(t, err, "give -concurrency one value")
}

// TestDBBudget: the baseline's pool is sized into what max_connections leaves beside the service
// processes' pools — at most 32, at most the clients — and a run that cannot fit is refused in
// one line.
func TestDBBudget(t *testing.T) {
	assert.Equal(t, 40, servicePool(func(string) string { return "" }), "32 and the lock queue's 8")
	assert.Equal(t, 10, servicePool(func(string) string { return "8" }), "8 and at least 2")
	assert.Equal(t, 125, servicePool(func(string) string { return "100" }))

	for _, tc := range []struct {
		name string
		b    dbBudget
		pool int
		err  string
	}{
		{"MariaDB's default beside three processes", dbBudget{maxConns: 151, services: 3, perService: 40, clients: 512, baseline: true}, 27, ""},
		{"room: the cap", dbBudget{maxConns: 1000, services: 3, perService: 40, clients: 512, baseline: true}, baselineMaxPool, ""},
		{"few clients: one connection each", dbBudget{maxConns: 1000, services: 3, perService: 40, clients: 4, baseline: true}, 4, ""},
		{"others hold some", dbBudget{maxConns: 151, inUse: 15, services: 3, perService: 40, clients: 64, baseline: true}, 12, ""},
		{"-target: their pools are counted in use", dbBudget{maxConns: 151, inUse: 100, clients: 64, baseline: true}, 32, ""},
		{"no baseline: the verifier's one", dbBudget{maxConns: 151, services: 3, perService: 40, clients: 512}, 1, ""},
		{"tight: the pools at their fullest do not fit", dbBudget{maxConns: 151, inUse: 36, services: 3, perService: 40, clients: 512, baseline: true}, 8, ""},
		{"nothing free", dbBudget{addr: "127.0.0.1:3306", maxConns: 151, inUse: 140, services: 3, perService: 40, clients: 512, baseline: true}, 0,
			"database 127.0.0.1:3306: max_connections is 151 with 140 connections in use: not even the baseline's 8 fit; raise max_connections or close some"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.b.size()
			if tc.err != "" {
				require.Error(t, err)
				assert.Equal(t, tc.err, err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.pool, b.pool)
			fits := b.services*b.perService+b.pool+b.inUse+dbSpare <= b.maxConns
			assert.Equal(t, fits, !b.tight, "tight exactly when the full pools do not fit")
			assert.Equal(t, b.tight, strings.HasPrefix(b.String(), "warning: "), b.String())
		})
	}
	tight, err := dbBudget{addr: "127.0.0.1:3306", maxConns: 151, inUse: 36, services: 3, perService: 40, clients: 64, baseline: true}.size()
	require.NoError(t, err)
	assert.Equal(t, "warning: database 127.0.0.1:3306: max_connections 151, 36 in use before the run; the run needs 3 service processes x 40 "+
		"(SECKILL_DB_MAX_CONNS and the pessimistic lock queue's pool) + 8 for the baseline's pool and the verifier + 4 spare = 132 with every pool full, "+
		"which does not fit: if the database refuses connections, raise max_connections or lower -spawn", tight.String())

	b := dbBudget{addr: "127.0.0.1:3306", maxConns: 151, services: 3, perService: 40, clients: 512, baseline: true, pool: 27}
	tooMany := b.explain(fmt.Errorf("wrapped: %w", &mysql.MySQLError{Number: 1040, Message: "Too many connections"}))
	assert.Equal(t, "the database at 127.0.0.1:3306 refused a connection (Error 1040: Too many connections): max_connections is 151, "+
		"and the run needs 3 service processes x 40 (SECKILL_DB_MAX_CONNS and the pessimistic lock queue's pool) + 27 for the baseline's pool "+
		"and the verifier + 4 spare = 151; raise it or lower -spawn", tooMany.Error())
	assert.Contains(t, b.explain(&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}).Error(),
		"cannot connect to the database at 127.0.0.1:3306 (connection refused)")
	other := errors.New("Error 1146: Table 'products' doesn't exist")
	assert.Same(t, other, b.explain(other), "not a refused connection: as it is")
}

// TestRefusedConnection: a database that refuses the tool's connections — closing them at the
// handshake, an unknown user, a user at its connection limit — ends the run before anything
// starts, in one line that says what to do, and with none of the driver's own log lines, which
// it writes to the process's stderr (file descriptor 2) when left to itself.
func TestRefusedConnection(t *testing.T) {
	closing, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer closing.Close()
	go func() {
		for {
			c, err := closing.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	closingDSN := "root:x@tcp(" + closing.Addr().String() + ")/seckill"

	leftToItself := captureStderr(t, func() {
		db, err := sql.Open("mysql", closingDSN)
		require.NoError(t, err)
		defer db.Close()
		assert.Error(t, db.Ping())
	})
	require.Contains(t, leftToItself, "[mysql]", "the capture sees the driver's log: this test can fail")

	runRefused := func(t *testing.T, dsn, want string) {
		t.Helper()
		var out, logs strings.Builder
		var err error
		stderr := captureStderr(t, func() {
			err = Run(context.Background(), []string{"-target", "http://127.0.0.1:1", "-token", "t", "-compare", "-soldout", "0",
				"-concurrency", "64,512", "-mysql", dsn, "-out", t.TempDir(), "-progress=false"}, &out, &logs)
		})
		require.Error(t, err)
		assert.Contains(t, err.Error(), want)
		assert.NotContains(t, err.Error(), "\n", "one line")
		for name, text := range map[string]string{"stdout": out.String(), "the tool's log": logs.String(), "fd 2": stderr} {
			assert.NotContains(t, text, "[mysql]", "%s has no driver log", name)
		}
	}
	t.Run("closed at the handshake", func(t *testing.T) {
		runRefused(t, closingDSN, "the database at "+closing.Addr().String()+" closed the connection")
	})

	dsn, _ := backends(t)
	if dsn == "" {
		t.Skip("no MariaDB for the refusals of a real server")
	}
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	admin, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	defer admin.Close()
	user := fmt.Sprintf("lt_refused_%d", os.Getpid())
	_, err = admin.Exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw' WITH MAX_USER_CONNECTIONS 1")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	_, err = admin.Exec("GRANT ALL ON `" + cfg.DBName + "`.* TO '" + user + "'@'%'")
	require.NoError(t, err)

	t.Run("an unknown user", func(t *testing.T) {
		wrong := cfg.Clone()
		wrong.User, wrong.Passwd = user+"_nobody", "x"
		// Error 1045 or 1698, as the server's version and accounts have it: the text is the same.
		runRefused(t, wrong.FormatDSN(), "Access denied for user '"+wrong.User+"'")
	})
	t.Run("a user at its connection limit", func(t *testing.T) {
		limited := cfg.Clone()
		limited.User, limited.Passwd = user, "pw"
		holder, err := sql.Open("mysql", limited.FormatDSN())
		require.NoError(t, err)
		defer holder.Close()
		conn, err := holder.Conn(context.Background())
		require.NoError(t, err, "the one connection the user may have")
		defer conn.Close()
		runRefused(t, limited.FormatDSN(), "refused a connection (Error 1226 (42000): User '"+user+"' has exceeded the 'max_user_connections' resource (current value: 1)): the DSN's user is at its max_user_connections")
	})
}

// captureStderr runs f with the process's file descriptor 2 sent to a file, and returns what was
// written there: the MySQL driver's default logger writes to it directly, past any io.Writer.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	file, err := os.CreateTemp(t.TempDir(), "stderr")
	require.NoError(t, err)
	defer file.Close()
	saved, err := syscall.Dup(2)
	require.NoError(t, err)
	require.NoError(t, syscall.Dup3(int(file.Fd()), 2, 0))
	func() {
		defer func() {
			_ = syscall.Dup3(saved, 2, 0)
			_ = syscall.Close(saved)
		}()
		f()
	}()
	raw, err := os.ReadFile(file.Name())
	require.NoError(t, err)
	return string(raw)
}

// TestWatchersPasses: -watchers runs each pass once more, on processes of its own, with the
// sale-page watchers open, its rows labelled with their count.
func TestWatchersPasses(t *testing.T) {
	o, err := parse([]string{"-group-commit", "0,64", "-watchers", "500"}, io.Discard)
	require.NoError(t, err)
	var labels []string
	for _, p := range o.passes() {
		labels = append(labels, fmt.Sprintf("%s/%s/%d", p.label, p.suffix, p.watchers))
	}
	assert.Equal(t, []string{"per-order/-gc0/0", "per-order, 500 watchers/-gc0-w/500", "batched 64/-gc64/0",
		"batched 64, 500 watchers/-gc64-w/500"}, labels)
	assert.Contains(t, passesText(o), "500 sale-page watchers")

	for _, args := range [][]string{{"-watchers", "-1"}, {"-watchers", "10001"}, {"-watchers", "5", "-waiting-room", "50"}} {
		_, err := parse(args, io.Discard)
		assert.Error(t, err, "%v", args)
	}
}
