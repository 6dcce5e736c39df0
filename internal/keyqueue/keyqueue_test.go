package keyqueue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/keyqueue"
)

type item struct {
	n    int
	done chan struct{}
}

// TestRoundsTakeWhatPiledUp holds a key's first round open while more items arrive, one of
// which gives up: the next rounds take the others, at most three each, and never the one that
// gave up; every item is answered once. A round that took an abandoned item would answer a
// request nobody waits for, with work done in its name.
func TestRoundsTakeWhatPiledUp(t *testing.T) {
	var (
		mu     sync.Mutex
		rounds [][]int
	)
	first, release := make(chan struct{}), make(chan struct{})
	q := keyqueue.New(3, func(key string, take func() []*item) {
		items := take()
		mu.Lock()
		rounds = append(rounds, nil)
		r := len(rounds) - 1
		for _, it := range items {
			rounds[r] = append(rounds[r], it.n)
		}
		mu.Unlock()
		if r == 0 {
			close(first)
			<-release
		}
		for _, it := range items {
			close(it.done)
		}
	})
	await := func(ctx context.Context, n int) error {
		it := &item{n: n, done: make(chan struct{})}
		return q.Await(ctx, "sku", it, it.done)
	}

	errs := make(chan error, 8)
	go func() { errs <- await(context.Background(), 0) }()
	<-first
	var wg sync.WaitGroup
	for n := 1; n <= 6; n++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- await(context.Background(), n)
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- await(ctx, 7) }()
	require.Eventually(t, func() bool { return keyqueue.Waiting(q, "sku") == 7 }, 5*time.Second, time.Millisecond,
		"the six and the one that gives up wait behind the first round")
	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled, "taken out before any round")
	close(release)
	wg.Wait()
	for range 7 {
		require.NoError(t, <-errs)
	}

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int{0}, rounds[0], "an idle key's first item goes at once, alone")
	var seen []int
	for _, r := range rounds[1:] {
		assert.LessOrEqual(t, len(r), 3, "a round takes at most three")
		seen = append(seen, r...)
	}
	assert.ElementsMatch(t, []int{1, 2, 3, 4, 5, 6}, seen, "each waiting item once, and not the one that gave up")
}
