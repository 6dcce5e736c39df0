package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"slices"
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

	"github.com/flashsale/seckill/internal/zkserver"
)

// TestMain lets the test binary stand in for the tool's when it re-executes itself as a bare
// server or as the services' etcd: under go test, os.Executable is the test binary.
func TestMain(m *testing.M) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	served, err := serveReexecuted(ctx)
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

// result builds a vegeta result as the attacker would record it.
func result(code uint16, body string, at, latency time.Duration) *vegeta.Result {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	return &vegeta.Result{Code: code, Body: []byte(body), Timestamp: t0.Add(at), Latency: latency}
}

func errBody(code string) string { return `{"error":{"code":"` + code + `","message":"m"}}` }

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *vegeta.Result
		want string
	}{
		{"created", result(201, `{"order_id":"x"}`, 0, 0), outcomeOK},
		{"sold out", result(409, errBody("sold_out"), 0, 0), outcomeSoldOut},
		{"already purchased", result(409, errBody("already_purchased"), 0, 0), outcomeAlreadyPurchased},
		{"busy", result(429, errBody("busy"), 0, 0), outcomeBusy},
		{"invalid", result(400, errBody("invalid_argument"), 0, 0), outcomeInvalid},
		{"unavailable", result(503, errBody("unavailable"), 0, 0), outcomeUnavailable},
		{"503 without a body", result(503, ``, 0, 0), outcomeUnavailable},
		{"server error", result(500, errBody("internal"), 0, 0), outcomeServerError},
		{"bad gateway", result(502, `<html>`, 0, 0), outcomeServerError},
		{"other 4xx", result(409, errBody("idempotency_conflict"), 0, 0), outcomeOtherClient},
		{"not json", result(404, `nope`, 0, 0), outcomeOtherClient},
		{"transport", &vegeta.Result{Code: 0, Error: "connection refused"}, outcomeTransport},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, classify(tc.r)) })
	}
}

// TestSplit: requests sent up to the last sale's answer are the selling phase; the rest are the
// sold-out phase, whatever order they arrive in.
func TestSplit(t *testing.T) {
	ms := time.Millisecond
	results := []*vegeta.Result{
		result(409, errBody("sold_out"), 30*ms, ms),
		result(201, `{}`, 0, 10*ms),
		result(201, `{}`, 5*ms, 15*ms), // the last sale: answered at 20ms
		result(429, errBody("busy"), 12*ms, ms),
		result(409, errBody("sold_out"), 20*ms, ms),
		result(409, errBody("sold_out"), 21*ms, ms),
	}
	selling, soldOut := split(results)
	assert.Len(t, selling, 4)
	assert.Len(t, soldOut, 2)
	for _, r := range soldOut {
		assert.True(t, r.Timestamp.After(results[2].End()))
	}
	assert.InDelta(t, 100.0, ordersPerSecond(selling), 0.01, "two orders between 0 and 20ms")

	none, all := split([]*vegeta.Result{result(409, errBody("sold_out"), 0, ms)})
	assert.Empty(t, none, "no sale: everything is sold-out phase")
	assert.Len(t, all, 1)
	assert.Zero(t, ordersPerSecond(none))
	assert.Equal(t, phase{}, newPhase(nil))
}

func TestCheck(t *testing.T) {
	acked := []ackedOrder{{OrderID: "o1", UserID: "u1"}, {OrderID: "o2", UserID: "u2"}}
	kept := map[string]stored{"o1": {"u1", "confirmed"}, "o2": {"u2", "pending"}}
	good := audit{InitialStock: 5, Stock: 3, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 2, Consistent: true}
	assert.True(t, check(good, acked, kept).ok())
	cancelled := []ackedOrder{{OrderID: "o1", UserID: "u1", Want: "cancelled"}, {OrderID: "o2", UserID: "u2"}}
	afterCancel := map[string]stored{"o1": {"u1", "cancelled"}, "o2": {"u2", "confirmed"}}
	assert.True(t, check(audit{InitialStock: 5, Stock: 4, OrderedQuantity: 1, Orders: 1, DistinctBuyers: 1}, cancelled, afterCancel).ok(),
		"a cancelled order holds nothing")

	for _, tc := range []struct {
		name    string
		audit   audit
		acked   []ackedOrder
		stored  map[string]stored
		problem string
	}{
		{"planted oversell", audit{InitialStock: 5, Stock: 0, OrderedQuantity: 7, Orders: 2, DistinctBuyers: 2}, acked, kept, "oversold by 2"},
		{"lost update", audit{InitialStock: 5, Stock: 4, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 2}, acked, kept, "stock 4 + ordered 2 != initial 5"},
		{"negative stock", audit{InitialStock: 1, Stock: -1, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 2}, acked, kept, "negative"},
		{"a user twice", audit{InitialStock: 5, Stock: 3, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 1}, acked, kept, "a user holds two"},
		{"a lost order", good, acked, map[string]stored{"o1": {"u1", "confirmed"}}, "o2 was acknowledged but is not stored"},
		{"an order for someone else", good, acked, map[string]stored{"o1": {"u1", "confirmed"}, "o2": {"u9", "confirmed"}}, "stored for u9"},
		{"acknowledged twice", audit{InitialStock: 5, Stock: 3, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 2},
			[]ackedOrder{{OrderID: "o1", UserID: "u1"}, {OrderID: "o1", UserID: "u1"}}, kept, "acknowledged twice"},
		{"an order nobody was told of", audit{InitialStock: 5, Stock: 2, OrderedQuantity: 3, Orders: 3, DistinctBuyers: 3}, acked, kept,
			"2 acknowledged orders active, 3 active in the store"},
		{"a cancel that did not take", audit{InitialStock: 5, Stock: 3, OrderedQuantity: 2, Orders: 2, DistinctBuyers: 2}, cancelled, kept,
			"o1 should be cancelled but is confirmed"},
		{"a unit returned twice", audit{InitialStock: 5, Stock: 5, OrderedQuantity: 1, Orders: 1, DistinctBuyers: 1}, cancelled, afterCancel,
			"stock 5 + ordered 1 != initial 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := check(tc.audit, tc.acked, tc.stored)
			require.False(t, v.ok(), "the verifier passed a broken sale")
			assert.Contains(t, strings.Join(v.Problems, "; "), tc.problem)
		})
	}
}

// TestJudge: a safe strategy fails on any problem or 5xx; naive fails when it did NOT oversell.
func TestJudge(t *testing.T) {
	safe := report{Strategy: "hybrid", Outcomes: map[string]int{"ok": 5}}
	safe.judge()
	assert.Empty(t, safe.Failed)
	broken := report{Strategy: "hybrid", Outcomes: map[string]int{"ok": 5, outcomeServerError: 1}, Verdict: verdict{Problems: []string{"oversold by 1"}}}
	broken.judge()
	assert.Len(t, broken.Failed, 2)
	blind := report{Strategy: "naive", ExpectOversell: true, Outcomes: map[string]int{"ok": 5}}
	blind.judge()
	assert.Contains(t, strings.Join(blind.Failed, ""), "did not oversell")
	caught := report{Strategy: "naive", ExpectOversell: true, Outcomes: map[string]int{"ok": 9}, Verdict: verdict{Oversold: 4, Problems: []string{"oversold by 4"}}}
	caught.judge()
	assert.Empty(t, caught.Failed)

	held := newReport("unguarded-etcd", "unguarded-etcd", "lt-1", sale{}, faultLockLoss)
	require.True(t, held.ExpectOversell, "under the fault, the unguarded lock must be seen failing")
	held.judge()
	assert.Contains(t, strings.Join(held.Failed, ""), "unguarded-etcd did not oversell under lock-loss", "the message names the strategy")
	assert.False(t, newReport("unguarded-etcd", "unguarded-etcd", "lt-1", sale{}, "").ExpectOversell, "no fault: nothing to expect")
	assert.False(t, newReport("etcd", "etcd", "lt-1", sale{}, faultLockLoss).ExpectOversell, "the guarded one keeps the invariant")
}

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

// TestLowestNode: the ZooKeeper holder is the lowest sequence number, whatever the guids before
// it — sorting the names as a whole would take a waiter's node.
func TestLowestNode(t *testing.T) {
	holder, ok := lowestNode([]string{"_c_aaa-lock-0000000012", "_c_zzz-lock-0000000003", "_c_mmm-lock-0000000007"})
	require.True(t, ok)
	assert.Equal(t, "_c_zzz-lock-0000000003", holder)
	_, ok = lowestNode(nil)
	assert.False(t, ok)
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out strings.Builder
	err := run(ctx, args, &out, testWriter{t})
	t.Log("\n" + out.String())
	require.NoError(t, err)
	return out.String()
}

// TestSmokeCompare is the CI smoke test of the tool: three service processes on one database,
// Redis and etcd — and a ZooKeeper the tool starts (-zk start) where one can run — every
// strategy compared with small numbers. It passes only if every safe strategy kept the invariant
// (in the audit, every order, and SQL) and naive was caught overselling.
func TestSmokeCompare(t *testing.T) {
	args := []string{"-compare", "-stock", "30", "-users", "120", "-concurrency", "16", "-retry-busy", "5", "-soldout", "1s"}
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
	assert.Contains(t, out, "`"+bareRow+"`", "the bare handler was measured")
	assert.Contains(t, out, "Sold-out phase")
	assert.Contains(t, out, "Targets of the performance issue")
}

// TestSmokeLockLoss: the tool on three processes with -fault lock-loss, taking each sale's lock
// from its holder every millisecond or two while it sells. Every unguarded strategy — the lock
// alone — must be caught overselling, every guarded one must keep the invariant with the same
// lock failing under it: the version check and the fencing tokens are what hold, not the lock.
func TestSmokeLockLoss(t *testing.T) {
	args := []string{"-fault", faultLockLoss, "-stock", "200", "-users", "800", "-concurrency", "32", "-retry-busy", "5", "-soldout", "0"}
	o := options{fault: faultLockLoss}
	if err := zkserver.Available(); err == nil || os.Getenv("SECKILL_TEST_REQUIRE_BACKENDS") == "1" {
		args, o.zk = append(args, "-zk", zkStart), zkStart
	} else {
		t.Logf("without zookeeper: %v", err)
	}
	if testRedis(t) == "" {
		t.Skip("-fault lock-loss needs a real Redis")
	}
	out := smoke(t, args...)
	for _, s := range o.strategies() {
		verdict := "invariant holds under lock-loss"
		if mustOversell(s, faultLockLoss) {
			verdict = "caught as expected"
		}
		assert.Regexp(t, "(?m)^\\| `"+s+"` \\|.*"+verdict, out, s)
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

// testWriter sends the tool's log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestGrowth: the soak's leak judgement ignores the noise of a busy process and names what keeps
// growing.
func TestGrowth(t *testing.T) {
	base := sample{Goroutines: 100, RSS: 60 << 20, HeapInUse: 20 << 20, OpenConns: 10, Sessions: 1}
	assert.Empty(t, growth(base, sample{Goroutines: 160, RSS: 100 << 20, HeapInUse: 50 << 20, OpenConns: 12, Sessions: 1}), "noise")
	for name, last := range map[string]sample{
		"goroutines": {Goroutines: 400, RSS: 60 << 20, HeapInUse: 20 << 20, Sessions: 1},
		"resident":   {Goroutines: 100, RSS: 200 << 20, HeapInUse: 20 << 20, Sessions: 1},
		"heap":       {Goroutines: 100, RSS: 60 << 20, HeapInUse: 90 << 20, Sessions: 1},
		"sessions":   {Goroutines: 100, RSS: 60 << 20, HeapInUse: 20 << 20, Sessions: 3},
	} {
		assert.Len(t, growth(base, last), 1, name)
	}
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
	assert.Equal(t, outcomeSoldOut, classify(&vegeta.Result{Code: uint16(resp.StatusCode), Body: raw}))

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
	_, ok := b.row()
	assert.False(t, ok, "no row before a measurement")
	for range 3 {
		var p phaseSlices
		for range 2 {
			b.slice(context.Background(), 150*time.Millisecond, &p, nil)
		}
		s := p.steady()
		b.measured(s)
		assert.Positive(t, s.Requests)
		assert.Equal(t, s.Requests, s.Outcomes[outcomeSoldOut], "every answer is 409 sold_out: %v", s.Outcomes)
		assert.Positive(t, s.Throughput)
	}
	r, ok := b.row()
	require.True(t, ok)
	assert.Equal(t, bareRow, r.Strategy)
	rates := []float64{b.all[0].Throughput, b.all[1].Throughput, b.all[2].Throughput}
	slices.Sort(rates)
	assert.Equal(t, rates[1], r.Steady.Throughput, "the median measurement")
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
	l := load{targets: []string{srv.URL}, sku: "lt-s", strategy: "hybrid", users: 5, requests: 5, rate: 50, concurrency: 4, timeout: 5 * time.Second}
	var p phaseSlices // in two slices, as beside the bare handler: buyers stay new across them
	l.soldOutSlice(context.Background(), "hybrid", 100*time.Millisecond, &p)
	l.soldOutSlice(context.Background(), "hybrid", 100*time.Millisecond, &p)
	s := p.steady()
	require.Positive(t, s.Requests)
	assert.Equal(t, 200*time.Millisecond, s.Duration)
	assert.Equal(t, s.Outcomes[outcomeOK], len(s.acked), "every 201 of the phase is kept for the verifier")
	assert.Positive(t, s.Outcomes[outcomeOK])
	assert.Positive(t, s.TooMany)
	assert.Positive(t, s.Server)
	assert.Positive(t, s.Outcomes[outcomeSoldOut])
	assert.Zero(t, s.unexpected())
	assert.Greater(t, s.Requests, 50/5, "the closed model, not -rate: the phase measures capacity")

	safe := report{Strategy: "hybrid", Outcomes: map[string]int{outcomeOK: 5}, Steady: &s}
	safe.judge()
	assert.Contains(t, strings.Join(safe.Failed, "; "), "201 in the sold-out phase")
	naive := report{Strategy: "naive", ExpectOversell: true, Outcomes: map[string]int{outcomeOK: 9}, Verdict: verdict{Oversold: 4}, Steady: &s}
	naive.judge()
	assert.Empty(t, naive.Failed)
}

// TestJudgeAfterSoldOut: a problem that appears only after the sold-out phase fails the run, once.
func TestJudgeAfterSoldOut(t *testing.T) {
	r := report{Strategy: "hybrid", Outcomes: map[string]int{outcomeOK: 5}, Verdict: verdict{Problems: []string{"p1"}},
		Steady: &steady{Outcomes: map[string]int{outcomeSoldOut: 10}, Verdict: &verdict{Problems: []string{"p1", "p2"}}}}
	r.judge()
	assert.Equal(t, []string{"p1", "after the sold-out phase: p2"}, r.Failed)
	clean := report{Strategy: "hybrid", Outcomes: map[string]int{outcomeOK: 5},
		Steady: &steady{Outcomes: map[string]int{outcomeSoldOut: 10, outcomeBusy: 3}, TooMany: 3, Verdict: &verdict{}}}
	clean.judge()
	assert.Empty(t, clean.Failed, "429 and 5xx in the sold-out phase are reported, not failures")
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
}

// TestGoals: each target holds, fails or is not measured, with its numbers; the references and
// the unsafe control are not judged.
func TestGoals(t *testing.T) {
	base := &report{Strategy: "baseline", OrdersPerSecond: 200}
	bare := &steady{Throughput: 10000}
	good := report{Strategy: "hybrid (batched 64)", OrdersPerSecond: 2400, Selling: phase{Requests: 100, P99: 30 * time.Millisecond},
		Steady: &steady{Throughput: 9000, Bare: bare, VsBare: 0.9}, PeakRSSMB: 80}
	g := goals(good, base, 64)
	require.Len(t, g, len(goalNames))
	for i, x := range g {
		require.NotNil(t, x.Met, x.Name)
		assert.True(t, *x.Met, x.Name)
		assert.Equal(t, goalNames[i], x.Name)
	}
	assert.Equal(t, "yes: 12.00x (2400 vs 200 orders/s)", g[0].text())
	assert.Equal(t, "yes: 0.90x (9000 vs 10000 req/s)", g[1].text())
	assert.Equal(t, "yes: 30.0 ms", g[2].text())
	assert.Equal(t, "yes: 80 MB", g[3].text())

	bad := report{Strategy: "pessimistic", OrdersPerSecond: 1000, Selling: phase{Requests: 100, P99: 51 * time.Millisecond},
		Steady: &steady{Throughput: 7000, Bare: bare, VsBare: 0.7}, PeakRSSMB: 101, PeakRSSSinceStart: true}
	for _, x := range goals(bad, base, 16) {
		require.NotNil(t, x.Met, x.Name)
		assert.False(t, *x.Met, x.Name)
		assert.True(t, strings.HasPrefix(x.text(), "NO: "), x.text())
	}
	assert.Contains(t, goals(bad, base, 16)[2].Detail, "at 16 clients (stated at 64)")
	assert.Contains(t, goals(bad, base, 16)[3].Detail, "since the process started")

	for _, x := range goals(report{Strategy: "hybrid"}, nil, 64) {
		assert.Nil(t, x.Met, "%s: nothing was measured", x.Name)
		assert.True(t, strings.HasPrefix(x.text(), "n/a: "), x.text())
	}
	skipped := goals(report{Strategy: "etcd", Steady: &steady{Skipped: "the sale did not sell out"}}, base, 64)
	assert.Equal(t, "n/a: the sale did not sell out", skipped[1].text())
	assert.Nil(t, goals(*base, base, 64))
	assert.Nil(t, goals(report{Strategy: bareRow, Steady: bare}, base, 64))
	assert.Nil(t, goals(report{Strategy: "naive", ExpectOversell: true}, base, 64))
}

func TestParsePeakRSS(t *testing.T) {
	n, err := parsePeakRSS([]byte("Name:\tseckill\nVmPeak:\t 2000 kB\nVmHWM:\t    51200 kB\nVmRSS:\t 40000 kB\n"))
	require.NoError(t, err)
	assert.Equal(t, int64(50<<20), n)
	_, err = parsePeakRSS([]byte("Name:\tseckill\n"))
	assert.Error(t, err)

	p := peaks{pids: []int{os.Getpid()}}
	p.begin()
	mb, err := p.highest()
	require.NoError(t, err)
	assert.Positive(t, mb)
}

func TestFileName(t *testing.T) {
	assert.Equal(t, "hybrid-batched-64", fileName("hybrid (batched 64)"))
	assert.Equal(t, "hybrid-per-order", fileName("hybrid (per-order)"))
	assert.Equal(t, "pessimistic", fileName("pessimistic"))
}
