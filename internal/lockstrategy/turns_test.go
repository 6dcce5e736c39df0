package lockstrategy

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestTurns: a releaser waits out the pause once, counted from its release; nobody else waits.
func TestTurns(t *testing.T) {
	ctx := context.Background()
	tr := newTurns()
	start := time.Now()
	tr.wait(ctx, "k", time.Minute)
	assert.Less(t, time.Since(start), time.Second, "a key this instance never released: no wait")

	tr.done("k")
	start = time.Now()
	tr.wait(ctx, "k", 50*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond, "just released: wait")

	start = time.Now()
	tr.wait(ctx, "k", time.Minute)
	assert.Less(t, time.Since(start), time.Second, "the turn was taken: no second wait")

	tr.done("k")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	start = time.Now()
	tr.wait(cancelled, "k", time.Minute)
	assert.Less(t, time.Since(start), time.Second, "a cancelled request does not wait")
}
