package lock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestTurns: a releaser waits out the pause once, counted from its release; nobody else waits.
func TestTurns(t *testing.T) {
	ctx := context.Background()
	tr := NewTurns()
	start := time.Now()
	tr.Wait(ctx, "k", time.Minute)
	assert.Less(t, time.Since(start), time.Second, "a key this instance never released: no wait")

	tr.Done("k")
	start = time.Now()
	tr.Wait(ctx, "k", 50*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond, "just released: wait")

	start = time.Now()
	tr.Wait(ctx, "k", time.Minute)
	assert.Less(t, time.Since(start), time.Second, "the turn was taken: no second wait")

	tr.Done("k")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	start = time.Now()
	tr.Wait(cancelled, "k", time.Minute)
	assert.Less(t, time.Since(start), time.Second, "a cancelled request does not wait")
}
