package quantile_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/flashsale/seckill/quantile"
)

// TestOf: the nearest rank, by its definition — at least a fraction q of the samples at or
// below it, fewer strictly below — for every count up to 1000 and the quantiles the reports
// print; in any order; 0 for none.
func TestOf(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 1000; n++ {
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = time.Duration(i+1) * time.Millisecond
		}
		rnd.Shuffle(n, func(i, j int) { d[i], d[j] = d[j], d[i] })
		for _, p := range []int{0, 50, 90, 99, 100} {
			rank := int(quantile.Of(d, float64(p)/100) / time.Millisecond) // samples at or below it: they are 1..n ms
			// In integers, so that no rounding hides an off-by-one.
			if !assert.GreaterOrEqual(t, 100*rank, p*n, "n=%d p%d", n, p) ||
				!assert.Less(t, 100*(rank-1), max(p*n, 1), "n=%d p%d: not the smallest", n, p) {
				return
			}
		}
	}
	assert.Equal(t, 3*time.Second, quantile.Of([]time.Duration{5 * time.Second, time.Second, 3 * time.Second}, 0.5))
	assert.Zero(t, quantile.Of(nil, 0.99))
}
