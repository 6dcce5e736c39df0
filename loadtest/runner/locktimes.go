package runner

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// The lock histograms of the service's /metrics (README, Metrics), one series per strategy label.
const (
	lockWaitMetric = "seckill_lock_wait_seconds"
	lockHoldMetric = "seckill_lock_hold_seconds"
)

// histogram is one Prometheus histogram series as scraped: cumulative counts by upper bound (le,
// ascending, +Inf last), the sum and the count of the observations.
type histogram struct {
	Bounds []float64
	Counts []float64
	Sum    float64
	Count  float64
}

// seriesKey names one histogram series of an instance: the metric and its strategy label.
type seriesKey struct{ metric, strategy string }

// addLockSeries takes one line of the lock histograms into s (name is the series with its
// labels); ok is false when the line is of another metric.
func (s *sample) addLockSeries(metric, name string, v float64) (ok bool) {
	var base, part string
	for _, m := range []string{lockWaitMetric, lockHoldMetric} {
		if p, found := strings.CutPrefix(metric, m+"_"); found {
			base, part = m, p
		}
	}
	if base == "" {
		return false
	}
	if s.Locks == nil {
		s.Locks = map[seriesKey]*histogram{}
	}
	key := seriesKey{base, labelValue(name, "strategy")}
	h := s.Locks[key]
	if h == nil {
		h = &histogram{}
		s.Locks[key] = h
	}
	switch part {
	case "bucket":
		le, err := strconv.ParseFloat(labelValue(name, "le"), 64)
		if err != nil {
			return true
		}
		h.Bounds, h.Counts = append(h.Bounds, le), append(h.Counts, v)
	case "sum":
		h.Sum = v
	case "count":
		h.Count = v
	}
	return true
}

// labelValue is the value of label key in a series name such as
// seckill_lock_wait_seconds_bucket{strategy="hybrid",le="0.0001"}; "" when it has none.
func labelValue(name, key string) string {
	_, labels, ok := strings.Cut(name, "{")
	if !ok {
		return ""
	}
	for _, pair := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
		if k, v, ok := strings.Cut(pair, "="); ok && k == key {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// lockTimes is what the lock histograms recorded during one row — its sale, resale and sold-out
// phase — over all the instances.
type lockTimes struct {
	Wait lockTime `json:"wait"`
	Hold lockTime `json:"hold"`
}

// lockTime is one histogram's growth over a row. Mean is exact (sum over count); P50 and P99 are
// interpolated within the buckets as PromQL's histogram_quantile does, so they are as coarse as
// the buckets, each twice the one before from 0.1 ms.
type lockTime struct {
	Count int           `json:"count"`
	Mean  time.Duration `json:"mean"`
	P50   time.Duration `json:"p50"`
	P99   time.Duration `json:"p99"`
}

// newLockTimes is the growth of strategy's lock histograms from before to after (one sample per
// instance, in the same order), summed over the instances; nil when the samples do not pair up.
// Only one row sells at a time, so the growth is that row's. With the server's default strategy
// (strategy "") every strategy label counts.
func newLockTimes(strategy string, before, after []sample) *lockTimes {
	if len(before) != len(after) {
		return nil
	}
	var wait, hold histogram
	for i := range after {
		for key, h := range after[i].Locks {
			if strategy != "" && key.strategy != strategy {
				continue
			}
			into := &wait
			if key.metric == lockHoldMetric {
				into = &hold
			}
			into.add(h.minus(before[i].Locks[key]))
		}
	}
	return &lockTimes{Wait: wait.summary(), Hold: hold.summary()}
}

// minus is h's growth since earlier (nil: the series did not exist yet).
func (h *histogram) minus(earlier *histogram) histogram {
	d := histogram{Bounds: h.Bounds, Counts: append([]float64(nil), h.Counts...), Sum: h.Sum, Count: h.Count}
	if earlier == nil || len(earlier.Counts) != len(h.Counts) {
		return d
	}
	for i := range d.Counts {
		d.Counts[i] -= earlier.Counts[i]
	}
	d.Sum -= earlier.Sum
	d.Count -= earlier.Count
	return d
}

// add sums o into h; every instance runs the same code, so the buckets are the same.
func (h *histogram) add(o histogram) {
	if len(h.Bounds) == 0 {
		h.Bounds, h.Counts = o.Bounds, make([]float64, len(o.Counts))
	}
	if len(o.Counts) != len(h.Counts) {
		return
	}
	for i := range o.Counts {
		h.Counts[i] += o.Counts[i]
	}
	h.Sum += o.Sum
	h.Count += o.Count
}

func (h histogram) summary() lockTime {
	if h.Count <= 0 {
		return lockTime{}
	}
	seconds := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return lockTime{Count: int(h.Count), Mean: seconds(h.Sum / h.Count), P50: seconds(h.quantile(0.5)), P99: seconds(h.quantile(0.99))}
}

// quantile estimates the q-quantile in seconds as histogram_quantile does: linearly within the
// bucket the rank falls in (the first from 0); in the +Inf bucket, the highest finite bound.
func (h histogram) quantile(q float64) float64 {
	if len(h.Counts) == 0 {
		return 0
	}
	rank := q * h.Counts[len(h.Counts)-1]
	for i, c := range h.Counts {
		if c < rank {
			continue
		}
		lower, below := 0.0, 0.0
		if i > 0 {
			lower, below = h.Bounds[i-1], h.Counts[i-1]
		}
		if math.IsInf(h.Bounds[i], 1) {
			return lower
		}
		return lower + (h.Bounds[i]-lower)*(rank-below)/(c-below)
	}
	return 0
}
