package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/flashsale/seckill/loadtest/attack"
	"github.com/flashsale/seckill/loadtest/proc"
	"github.com/flashsale/seckill/loadtest/report"
)

// bareAddrEnv, when set, turns the tool's own binary into a bare server listening on its value
// (a loopback host:port). The tool re-executes itself this way so that the bare reference runs
// as separate processes, like the service instances it is compared with, and needs no other
// binary.
const bareAddrEnv = "LOADTEST_BARE_ADDR"

// bareHandler is the ceiling for a sold-out answer: what net/http alone costs to read an order
// and answer the contract's 409 sold_out (internal/handler/openapi.yaml), with no routing library, no validation, no Redis, no database.
// A service that rejects early should come close to it.
func bareHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/products/{sku}/orders", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 4<<10)) // the body limit of the contract
		raw, _ := json.Marshal(errorBody{Error: errorDetail{Code: attack.SoldOut, Message: "product " + r.PathValue("sku") + " is sold out"}})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write(raw)
	})
	return mux
}

// errorBody is the contract's error shape.
type errorBody struct {
	Error errorDetail `json:"error"`
}

// errorDetail is the inside of errorBody.
type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// serveBare is the bare server's process: it listens on addr, loopback only (it is a local
// reference, never a service), prints "listening on <url>" on stdout the way cmd/api does so
// that start can read it, and serves until ctx ends.
func serveBare(ctx context.Context, addr string, stdout io.Writer) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: %w", bareAddrEnv, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s=%s: the bare server listens on a loopback address only", bareAddrEnv, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: bareHandler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// bareServers are the bare handler's processes, as many as service instances, started once and
// kept for the run, so that each sold-out phase can be held against a bare measurement taken
// alongside it: on a shared machine the same load drifts between the start and the end of a
// run, and even within a phase, by more than the difference being measured.
type bareServers struct {
	servers []*proc.Instance
	urls    []string
	opts    options
	log     io.Writer
	all     map[int][]attack.Steady // every measurement by client count, for the report's bare row of each
}

// startBare starts n bare servers.
func startBare(ctx context.Context, o options, n int, dir string, logs io.Writer) (*bareServers, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bare handler: %w", err)
	}
	b := &bareServers{opts: o, log: logs, all: map[int][]attack.Steady{}}
	for i := range n {
		log := filepath.Join(dir, fmt.Sprintf("bare-%d.log", i))
		inst, err := proc.Start(ctx, exe, append(os.Environ(), bareAddrEnv+"=127.0.0.1:0"), log)
		if err != nil {
			b.stop()
			return nil, fmt.Errorf("bare handler: %w", err)
		}
		b.servers = append(b.servers, inst)
		b.urls = append(b.urls, inst.URL)
	}
	fmt.Fprintf(logs, "loadtest: bare handler: %d server(s) at %v\n", n, b.urls)
	return b, nil
}

// slice attacks the bare servers with clients for d into p, exactly as a slice of a sold-out
// phase attacks the service.
func (b *bareServers) slice(ctx context.Context, clients int, d time.Duration, p *attack.Slices, progress io.Writer) {
	// The strategy field only gives the body the shape and size of the strategies' requests.
	l := attack.Load{Targets: b.urls, SKU: b.opts.sku + "-bare", Strategy: allStrategies[0], Requests: b.opts.requests,
		Concurrency: clients, Timeout: b.opts.timeout, Progress: progress}
	l.SoldOutSlice(ctx, report.BareRow, d, p)
}

// measured records one bare measurement at clients for the report's bare row.
func (b *bareServers) measured(clients int, s attack.Steady) {
	fmt.Fprintf(b.log, "loadtest: bare handler: %d requests at %.0f req/s, p99 %s ms\n", s.Requests, s.Throughput, report.Milliseconds(s.P99))
	b.all[clients] = append(b.all[clients], s)
}

// row is the bare handler's row of the report at clients: the measurement of median rate among
// all taken at that count.
func (b *bareServers) row(clients int) (report.Row, bool) {
	all := b.all[clients]
	if len(all) == 0 {
		return report.Row{}, false
	}
	sorted := slices.SortedFunc(slices.Values(all), func(x, y attack.Steady) int { return cmp.Compare(x.Throughput, y.Throughput) })
	median := sorted[len(sorted)/2]
	return report.Row{Strategy: report.BareRow, Steady: &median, Clients: clients,
		Family: fmt.Sprintf("net/http alone: reads the body, answers 409 sold_out (no service); median of %d measurements, one before each sold-out phase", len(all))}, true
}

func (b *bareServers) stop() { proc.Stop(b.servers) }
