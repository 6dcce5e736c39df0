// Command orderpath lists the source files of this module that one order runs, per strategy: the
// path a reader follows from the route to the database and back. It needs a build with
// coverage, which its script makes:
//
//	tools/orderpath/run [-strategy hybrid,queued] [-mysql DSN -redis ADDR]
//
// It opens one instance on the embedded default (or on -mysql and -redis), places a first order
// to warm what is built once, then for each strategy clears the coverage counters, places one
// order and keeps the blocks it ran. A queued order is followed until it is written (GET with
// ?wait), as its client does. The blocks the instance runs on its own while idle (heartbeats,
// sweeps, the expirer) are left out: a file counts when it holds a block only the order ran, so
// a file whose every block the order ran also runs on a timer is missed.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/coverage"
	"sort"
	"strings"
	"time"

	"github.com/flashsale/seckill/internal/app"
)

const token = "orderpath"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "orderpath:", err)
		os.Exit(1)
	}
}

func run() error {
	strategies := flag.String("strategy", "hybrid,queued", "the strategies whose order to follow, comma-separated")
	mysql := flag.String("mysql", "", "a MySQL/MariaDB DSN; empty: the embedded SQLite")
	redisAddr := flag.String("redis", "", "a Redis address; empty: the embedded Redis")
	idle := flag.Duration("idle", 3*time.Second, "how long to watch the idle instance for the blocks it runs on its own")
	flag.Parse()
	if err := coverage.ClearCounters(); err != nil {
		return fmt.Errorf("%w (build with -cover -covermode=atomic, see tools/orderpath/run)", err)
	}
	work, err := os.MkdirTemp("", "orderpath")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	cfg := app.Defaults()
	cfg.DataDir = filepath.Join(work, "data")
	cfg.AdminToken = token
	cfg.MySQLDSN = *mysql
	if *redisAddr != "" {
		cfg.RedisAddrs = []string{*redisAddr}
	}
	ctx := context.Background()
	a, err := app.Open(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard)
	if err != nil {
		return err
	}
	defer a.Close()
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()

	names := strings.Split(*strategies, ",")
	ran := map[string]map[string]bool{}
	for i, name := range names {
		sku := fmt.Sprintf("orderpath-%d-%d", time.Now().UnixNano(), i)
		if err := call(srv.URL, http.MethodPut, "/api/v1/products/"+sku, `{"name":"orderpath","stock":10}`, nil); err != nil {
			return err
		}
		if err := order(srv.URL, sku, "warm", name); err != nil {
			return err
		}
		if err := coverage.ClearCounters(); err != nil {
			return err
		}
		if err := order(srv.URL, sku, "buyer", name); err != nil {
			return err
		}
		if ran[name], err = blocks(work, name); err != nil {
			return err
		}
	}
	if err := coverage.ClearCounters(); err != nil {
		return err
	}
	time.Sleep(*idle) // a window of the instance's own timers, not an order's event
	background, err := blocks(work, "idle")
	if err != nil {
		return err
	}
	for _, name := range names {
		report(os.Stdout, name, ran[name], background)
	}
	return nil
}

// order places one order of strategy name and, for a queued one, waits until it is written.
func order(url, sku, user, name string) error {
	var o struct {
		OrderID string `json:"order_id"`
		Status  string `json:"status"`
	}
	body := fmt.Sprintf(`{"user_id":%q,"quantity":1,"strategy":%q}`, user, name)
	if err := call(url, http.MethodPost, "/api/v1/products/"+sku+"/orders", body, &o); err != nil {
		return err
	}
	if o.Status != "queued" {
		return nil
	}
	if err := call(url, http.MethodGet, "/api/v1/orders/"+o.OrderID+"?wait=10s", "", &o); err != nil {
		return err
	}
	if o.Status == "queued" {
		return fmt.Errorf("order %s still queued after 10 s", o.OrderID)
	}
	return nil
}

func call(url, method, path, body string, out any) error {
	req, err := http.NewRequest(method, url+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// blocks writes the counters since the last clear and reads back the blocks that ran, as
// "file:start,end" of go tool covdata's text format.
func blocks(work, name string) (map[string]bool, error) {
	dir := filepath.Join(work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := coverage.WriteMetaDir(dir); err != nil {
		return nil, err
	}
	if err := coverage.WriteCountersDir(dir); err != nil {
		return nil, err
	}
	text := filepath.Join(work, name+".txt")
	if out, err := exec.Command("go", "tool", "covdata", "textfmt", "-i", dir, "-o", text).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go tool covdata: %w: %s", err, out)
	}
	f, err := os.Open(text)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ran := map[string]bool{}
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		fields := strings.Fields(lines.Text()) // file:start,end statements count
		if len(fields) == 3 && fields[2] != "0" {
			ran[fields[0]] = true
		}
	}
	if len(ran) == 0 {
		return nil, errors.New("no block ran: is the module in -coverpkg?")
	}
	return ran, lines.Err()
}

// report prints the files holding a block the order ran and the idle instance did not, this
// tool's own aside.
func report(w io.Writer, name string, ran, background map[string]bool) {
	files := map[string]bool{}
	for b := range ran {
		if !background[b] && !strings.Contains(b, "/tools/orderpath/") {
			files[b[:strings.LastIndex(b, ":")]] = true
		}
	}
	packages := map[string][]string{}
	for f := range files {
		dir, file := filepath.Split(strings.TrimPrefix(f, "github.com/flashsale/seckill/"))
		packages[dir] = append(packages[dir], file)
	}
	dirs := make([]string, 0, len(packages))
	for d := range packages {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	fmt.Fprintf(w, "%s: %d files in %d packages\n", name, len(files), len(packages))
	for _, d := range dirs {
		sort.Strings(packages[d])
		fmt.Fprintf(w, "  %-28s %s\n", d, strings.Join(packages[d], " "))
	}
}
