package scrape

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLockTimes: the growth of the lock histograms over a row, summed over the instances, and the
// quantiles interpolated within buckets as histogram_quantile does.
func TestLockTimes(t *testing.T) {
	hist := func(counts ...float64) *Histogram {
		return &Histogram{Bounds: []float64{0.001, 0.002, 0.004, math.Inf(1)}, Counts: counts, Sum: counts[len(counts)-1] * 0.0015, Count: counts[len(counts)-1]}
	}
	key := Series{LockWait, "hybrid"}
	other := Series{LockWait, "etcd"}
	before := []Sample{{Locks: map[Series]*Histogram{key: hist(10, 10, 10, 10)}}, {}}
	after := []Sample{
		{Locks: map[Series]*Histogram{key: hist(10, 60, 60, 60), other: hist(0, 0, 0, 99)}},
		{Locks: map[Series]*Histogram{key: hist(0, 50, 50, 50)}}, // its first observations: no series before
	}
	l := NewLockTimes("hybrid", before, after)
	require.NotNil(t, l)
	us := float64(time.Microsecond)
	assert.Equal(t, 100, l.Wait.Count, "50 on each instance; etcd's are not hybrid's")
	assert.InDelta(t, 1500*us, float64(l.Wait.Mean), us)
	assert.InDelta(t, 1500*us, float64(l.Wait.P50), us, "halfway through the (1 ms, 2 ms] bucket")
	assert.InDelta(t, 1990*us, float64(l.Wait.P99), us)
	assert.Zero(t, l.Hold.Count)
	assert.Nil(t, NewLockTimes("hybrid", before[:1], after), "samples that do not pair up")

	inf := Histogram{Bounds: []float64{0.001, math.Inf(1)}, Counts: []float64{1, 10}, Count: 10}
	assert.InDelta(t, 0.001, inf.quantile(0.99), 1e-12, "in the +Inf bucket: the highest finite bound")

	var s Sample
	assert.True(t, s.addLockSeries(LockHold+"_bucket", LockHold+`_bucket{strategy="etcd",le="0.0002"}`, 3))
	assert.False(t, s.addLockSeries("seckill_lock_lost_total", `seckill_lock_lost_total{strategy="etcd"}`, 1))
	assert.Equal(t, &Histogram{Bounds: []float64{0.0002}, Counts: []float64{3}}, s.Locks[Series{LockHold, "etcd"}])
}

// TestGrowth: the soak's leak judgement ignores the noise of a busy process and names what keeps
// growing.
func TestGrowth(t *testing.T) {
	base := Sample{Goroutines: 100, RSS: 60 << 20, HeapInUse: 20 << 20, OpenConns: 10, Sessions: 1}
	assert.Empty(t, Growth(base, Sample{Goroutines: 160, RSS: 100 << 20, HeapInUse: 50 << 20, OpenConns: 12, Sessions: 1}), "noise")
	for name, last := range map[string]Sample{
		"goroutines": {Goroutines: 400, RSS: 60 << 20, HeapInUse: 20 << 20, Sessions: 1},
		"resident":   {Goroutines: 100, RSS: 200 << 20, HeapInUse: 20 << 20, Sessions: 1},
		"heap":       {Goroutines: 100, RSS: 60 << 20, HeapInUse: 90 << 20, Sessions: 1},
		"sessions":   {Goroutines: 100, RSS: 60 << 20, HeapInUse: 20 << 20, Sessions: 3},
	} {
		assert.Len(t, Growth(base, last), 1, name)
	}
}
