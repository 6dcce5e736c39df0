package scrape

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// The lock histograms of the service's /metrics (README, Metrics), one series per strategy label.
const (
	LockWait = "seckill_lock_wait_seconds"
	LockHold = "seckill_lock_hold_seconds"
)

// Histogram is one Prometheus Histogram series as scraped: cumulative counts by upper bound (le,
// ascending, +Inf last), the sum and the count of the observations.
type Histogram struct {
	Bounds []float64
	Counts []float64
	Sum    float64
	Count  float64
}

// Series names one Histogram series of an instance: the metric and its strategy label.
type Series struct{ Metric, Strategy string }

// addLockSeries takes one line of the lock histograms into s (name is the series with its
// labels); ok is false when the line is of another metric.
func (s *Sample) addLockSeries(metric, name string, v float64) (ok bool) {
	var base, part string
	for _, m := range []string{LockWait, LockHold} {
		if p, found := strings.CutPrefix(metric, m+"_"); found {
			base, part = m, p
		}
	}
	if base == "" {
		return false
	}
	if s.Locks == nil {
		s.Locks = map[Series]*Histogram{}
	}
	key := Series{base, labelValue(name, "strategy")}
	h := s.Locks[key]
	if h == nil {
		h = &Histogram{}
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

// LockTimes is what the lock histograms recorded during one row — its sale, resale and sold-out
// phase — over all the instances.
type LockTimes struct {
	Wait LockTime `json:"wait"`
	Hold LockTime `json:"hold"`
}

// LockTime is one Histogram's Growth over a row. Mean is exact (sum over count); P50 and P99 are
// interpolated within the buckets as PromQL's histogram_quantile does, so they are as coarse as
// the buckets, each twice the one before from 0.1 ms.
type LockTime struct {
	Count int           `json:"count"`
	Mean  time.Duration `json:"mean"`
	P50   time.Duration `json:"p50"`
	P99   time.Duration `json:"p99"`
}

// NewLockTimes is the Growth of strategy's lock histograms from before to after (one Sample per
// instance, in the same order), summed over the instances; nil when the samples do not pair up.
// Only one row sells at a time, so the Growth is that row's. With the server's default strategy
// (strategy "") every strategy label counts.
func NewLockTimes(strategy string, before, after []Sample) *LockTimes {
	if len(before) != len(after) {
		return nil
	}
	var wait, hold Histogram
	for i := range after {
		for key, h := range after[i].Locks {
			if strategy != "" && key.Strategy != strategy {
				continue
			}
			into := &wait
			if key.Metric == LockHold {
				into = &hold
			}
			into.Add(h.Minus(before[i].Locks[key]))
		}
	}
	return &LockTimes{Wait: wait.summary(), Hold: hold.summary()}
}

// Minus is h's Growth since earlier (nil: the series did not exist yet).
func (h *Histogram) Minus(earlier *Histogram) Histogram {
	d := Histogram{Bounds: h.Bounds, Counts: append([]float64(nil), h.Counts...), Sum: h.Sum, Count: h.Count}
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

// Add sums o into h; every instance runs the same code, so the buckets are the same.
func (h *Histogram) Add(o Histogram) {
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

func (h Histogram) summary() LockTime {
	if h.Count <= 0 {
		return LockTime{}
	}
	seconds := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return LockTime{Count: int(h.Count), Mean: seconds(h.Sum / h.Count), P50: seconds(h.quantile(0.5)), P99: seconds(h.quantile(0.99))}
}

// quantile estimates the q-quantile in seconds as histogram_quantile does: linearly within the
// bucket the rank falls in (the first from 0); in the +Inf bucket, the highest finite bound.
func (h Histogram) quantile(q float64) float64 {
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
