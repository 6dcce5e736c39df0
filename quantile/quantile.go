// Package quantile is the sample quantile of the project's measured durations, the lab's and the
// load tool's, by nearest rank: the smallest sample with at least a fraction q of the samples at
// or below it, so that every figure is a time something really took. gonum's stat.Quantile
// (Empirical) computes it. It is public because the load tool, a black box of the service, uses
// it too. A histogram's quantile, interpolated within its buckets, is another thing: see
// loadtest/scrape.
package quantile

import (
	"slices"
	"time"

	"gonum.org/v1/gonum/stat"
)

// Of is the nearest-rank q-quantile of durations (0 <= q <= 1), in any order; 0 when there are
// none.
func Of(durations []time.Duration, q float64) time.Duration {
	if len(durations) == 0 {
		return 0
	}
	x := make([]float64, len(durations))
	for i, d := range durations {
		x[i] = float64(d) // exact below 2^53 ns, 104 days
	}
	slices.Sort(x)
	return time.Duration(stat.Quantile(q, stat.Empirical, x, nil))
}
