package docs

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recipe is the command line of operations.md that starts several local instances: variables,
// then the script.
var recipe = regexp.MustCompile(`(?m)^((?:[A-Z_]+=\S+ )*)(scripts/instances\.sh)$`)

var (
	// logLine is the script's line that says where an instance logs.
	logLine = regexp.MustCompile(`^instances: \d+ at \S+ \(log: (\S+)\)$`)
	// etcdLine is the line of an instance's log that says which etcd it uses; embeddedEtcd, that
	// it started one, and where.
	etcdLine     = regexp.MustCompile(`(?m)^etcd: .*$`)
	embeddedEtcd = regexp.MustCompile(`^etcd: embedded at (http://[^,]+),`)
)

// TestInstancesRecipe runs the several-instances recipe of operations.md as the page gives it —
// its variables left out, so that the three instances share the first one's embedded backends
// and the test needs nothing but Go — on free loopback ports, then sells through all three: a
// product put on one sells on the others, a buyer of one is refused on another, an order queued
// on one ends on another. One etcd, one Redis, one queue, one database; then SIGTERM stops them.
func TestInstancesRecipe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/api and starts three service processes")
	}
	m := recipe.FindStringSubmatch(pages(t)["docs/operations.md"])
	require.NotNil(t, m, "docs/operations.md has no line that runs scripts/instances.sh")

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // the build comes first
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", m[2], "0", "0", "0")
	cmd.Dir = root
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SECKILL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the script and its instances, killed together if the test fails
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })

	ready := make(chan []string, 1)
	logs := make(chan string, 3)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			t.Log(sc.Text())
			if m := logLine.FindStringSubmatch(sc.Text()); m != nil {
				logs <- m[1]
			}
			if rest, ok := strings.CutPrefix(sc.Text(), "instances: ready: "); ok {
				rest, _, _ = strings.Cut(rest, " (")
				ready <- strings.Fields(rest)
			}
		}
		close(ready)
	}()
	var urls []string
	select {
	case urls = <-ready:
	case <-ctx.Done():
	}
	require.Len(t, urls, 3, "the script did not say its three instances were ready")

	// One etcd: the first instance's, named to the others. Three embedded ones, each clearing the
	// one data directory's etcd, was the recipe's old failure.
	close(logs)
	var etcds []string // each instance's line that says which etcd it uses
	for l := range logs {
		raw, err := os.ReadFile(l)
		require.NoError(t, err)
		line := etcdLine.FindString(string(raw))
		require.NotEmpty(t, line, "%s says no etcd", l)
		etcds = append(etcds, line)
	}
	require.Len(t, etcds, 3)
	first := embeddedEtcd.FindStringSubmatch(etcds[0])
	require.NotNil(t, first, "the first instance does not start the embedded etcd: %s", etcds[0])
	for _, l := range etcds[1:] {
		assert.Equal(t, "etcd: "+first[1]+" (SECKILL_ETCD_ENDPOINTS)", l, "an instance does not use the first one's etcd")
	}

	sku := fmt.Sprintf("recipe-%d", time.Now().UnixNano())
	call(t, "PUT", urls[0]+"/api/v1/products/"+sku, `{"name":"recipe","stock":3}`, http.StatusOK)
	call(t, "POST", urls[1]+"/api/v1/products/"+sku+"/orders", `{"user_id":"u1","quantity":1}`, http.StatusCreated)
	refused := call(t, "POST", urls[2]+"/api/v1/products/"+sku+"/orders", `{"user_id":"u1","quantity":1}`, http.StatusConflict)
	assert.Contains(t, refused, "already_purchased", "one buyer, one order: the instances share Redis and the database")
	queued := call(t, "POST", urls[2]+"/api/v1/products/"+sku+"/orders", `{"user_id":"u2","quantity":1,"strategy":"queued"}`, http.StatusAccepted)
	var order struct {
		ID     string `json:"order_id"`
		Status string `json:"status"`
	}
	require.NoError(t, json.Unmarshal([]byte(queued), &order))
	require.NoError(t, json.Unmarshal([]byte(call(t, "GET", urls[0]+"/api/v1/orders/"+order.ID+"?wait=5s", "", http.StatusOK)), &order))
	assert.Contains(t, []string{"pending", "confirmed"}, order.Status, "an order queued on one instance is placed and read on another: one queue")
	var audit struct {
		Stock      int64 `json:"stock"`
		Orders     int64 `json:"orders"`
		Consistent bool  `json:"consistent"`
	}
	require.NoError(t, json.Unmarshal([]byte(call(t, "GET", urls[1]+"/api/v1/products/"+sku+"/audit", "", http.StatusOK)), &audit))
	assert.Equal(t, int64(1), audit.Stock)
	assert.Equal(t, int64(2), audit.Orders)
	assert.True(t, audit.Consistent)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() {
		for range ready { // the output drained, then the script's end
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		assert.NoError(t, err, "the script's exit on SIGTERM")
	case <-time.After(time.Minute):
		require.Fail(t, "the script did not stop within a minute of SIGTERM")
	}
	for _, u := range urls {
		if resp, err := http.Get(u + "/healthz"); err == nil {
			resp.Body.Close()
			assert.Failf(t, "an instance outlived the script", "%s still answers", u)
		}
	}
}

// call sends body (none when empty) with the script's default admin token and returns the answer's
// body, which must come with status want.
func call(t *testing.T, method, url, body string, want int) string {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer dev")
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, url, b)
	return string(b)
}
