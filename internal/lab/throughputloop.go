package lab

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// throughputCell is one measured figure: a family, a number of clients, one key or many.
type throughputCell struct {
	clients          int
	shared           bool
	pairs, timeouts  int
	elapsed          time.Duration
	rate             float64 // pairs a second
	measured, single bool    // single: one client, whose one key is the shared key too
}

// warmCycles is how many pairs each client does on its own key before the cells: the first
// ones pay for what is made once (a ZooKeeper directory, a connection, the JIT's first pass).
const warmCycles = 3

// measureFamily opens f for the most clients and measures every cell. One client has one key
// either way, so it is measured once and stands for both.
func measureFamily(ctx context.Context, f lockFamily, clientCounts []int, key func(slug, which string) string, cellTime, bound time.Duration) ([]throughputCell, error) {
	clients, closeAll, err := f.open(ctx, clientCounts[len(clientCounts)-1])
	if err != nil {
		return nil, err
	}
	defer closeAll()
	warmErrs := make([]error, len(clients))
	var warm sync.WaitGroup
	for i, cycle := range clients {
		warm.Go(func() {
			for range warmCycles {
				if _, warmErrs[i] = cycle(ctx, key(f.slug, fmt.Sprint(i)), bound); warmErrs[i] != nil {
					return
				}
			}
		})
	}
	warm.Wait()
	if err := errors.Join(warmErrs...); err != nil {
		return nil, err
	}
	var cells []throughputCell
	for _, n := range clientCounts {
		for _, shared := range []bool{false, true} {
			if n == 1 && shared {
				c := cells[len(cells)-1]
				c.shared = true
				cells = append(cells, c)
				continue
			}
			keyOf := func(i int) string { return key(f.slug, fmt.Sprint(i)) }
			if shared {
				keyOf = func(int) string { return key(f.slug, "one") }
			}
			c, err := measureCell(ctx, clients[:n], keyOf, cellTime, bound)
			if err != nil {
				return nil, err
			}
			c.shared, c.single = shared, n == 1
			cells = append(cells, c)
		}
	}
	return cells, nil
}

// maxCycles bounds a client's loop by count as well as by time, so that a lock that answers
// without doing anything (a broken one) cannot spin a core for the whole cell.
const maxCycles = 1_000_000

// measureCell releases the clients together and lets each loop lock -> unlock on its key for
// cellTime. The rate is the completed pairs over the time until the last client stopped —
// including the wait of a client that was queued when the time ran out.
func measureCell(ctx context.Context, clients []lockCycle, keyOf func(int) string, cellTime, bound time.Duration) (throughputCell, error) {
	pairs := make([]int, len(clients))
	timeouts := make([]int, len(clients))
	errs := make([]error, len(clients))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, cycle := range clients {
		wg.Go(func() {
			<-start
			deadline := time.Now().Add(cellTime)
			for n := 0; n < maxCycles && time.Now().Before(deadline) && ctx.Err() == nil; n++ {
				ok, err := cycle(ctx, keyOf(i), bound)
				if err != nil {
					errs[i] = err
					return
				}
				if ok {
					pairs[i]++
				} else {
					timeouts[i]++
				}
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	c := throughputCell{clients: len(clients), elapsed: time.Since(began), measured: true}
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return c, err
	}
	for i := range clients {
		c.pairs += pairs[i]
		c.timeouts += timeouts[i]
	}
	c.rate = float64(c.pairs) / c.elapsed.Seconds()
	return c, nil
}
