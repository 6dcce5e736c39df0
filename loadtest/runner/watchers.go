package runner

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// watching is the sale-page watchers of one product: event streams open while it sells, as
// buyers' pages would hold them, so that a row measures the sale with its watchers.
type watching struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	soldOut atomic.Int64  // watchers that saw state sold_out
	done    chan struct{} // closed once every watcher saw sold_out or ended
}

// watch opens n event streams of sku, spread over targets in turn, and returns once each has its
// first event; nil for n 0.
func watch(ctx context.Context, targets []string, sku string, n int) (*watching, error) {
	if n == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &watching{cancel: cancel, done: make(chan struct{})}
	// A stream lasts the whole sale: no client timeout, a connection each.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1}}
	var opened sync.WaitGroup
	errs := make(chan error, n)
	opened.Add(n)
	w.wg.Add(n)
	for i := range n {
		go func() {
			defer w.wg.Done()
			first := true
			defer func() {
				if first {
					opened.Done()
				}
			}()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, targets[i%len(targets)]+"/api/v1/products/"+sku+"/events", nil)
			if err != nil {
				errs <- err
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("events of %s: %s", sku, resp.Status)
				return
			}
			lines := bufio.NewScanner(resp.Body)
			for lines.Scan() {
				if !strings.HasPrefix(lines.Text(), "data: ") {
					continue
				}
				if first {
					first = false
					opened.Done()
				}
				if strings.Contains(lines.Text(), `"state":"sold_out"`) {
					w.soldOut.Add(1)
					return
				}
			}
		}()
	}
	go func() {
		w.wg.Wait()
		close(w.done)
	}()
	opened.Wait()
	select {
	case err := <-errs:
		w.stop(0)
		return nil, err
	default:
		return w, nil
	}
}

// stop waits up to grace for every watcher to see the end of the sale, then closes the streams;
// it returns how many saw sold_out.
func (w *watching) stop(grace time.Duration) int64 {
	if w == nil {
		return 0
	}
	select {
	case <-w.done:
	case <-time.After(grace):
	}
	w.cancel()
	w.wg.Wait()
	return w.soldOut.Load()
}
