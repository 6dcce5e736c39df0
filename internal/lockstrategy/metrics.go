package lockstrategy

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LockMetrics records how the strategies' sections behave, labelled by strategy: lock waits and
// holds, batches, retries, and the warning signs (long holds, locks lost, writes fenced out).
// What the locks do on their own is lock.Metrics.
type LockMetrics struct {
	wait, hold  *prometheus.HistogramVec
	heldTooLong *prometheus.CounterVec
	lost        *prometheus.CounterVec
	retries     *prometheus.CounterVec
	batches     *prometheus.HistogramVec
	queued      *prometheus.GaugeVec
	fencedOut   *prometheus.CounterVec
	threshold   time.Duration
	log         *slog.Logger
}

// NewLockMetrics registers the lock metrics. A hold longer than slowHold logs a warning.
func NewLockMetrics(reg prometheus.Registerer, slowHold time.Duration, log *slog.Logger) *LockMetrics {
	byStrategy := []string{"strategy"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, byStrategy)
	}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, byStrategy)
	}
	seconds := prometheus.ExponentialBuckets(0.0001, 2, 16)
	m := &LockMetrics{
		wait:        histogram("seckill_lock_wait_seconds", "Time spent acquiring a lock, by strategy.", seconds),
		hold:        histogram("seckill_lock_hold_seconds", "Time a lock was held, by strategy.", seconds),
		heldTooLong: counter("seckill_lock_held_too_long_total", "Locks held longer than the slow-hold threshold, by strategy."),
		lost: counter("seckill_lock_lost_total",
			"Locks found already expired or taken over by their holder, at release or before the write (a lost etcd or ZooKeeper session), by strategy."),
		retries: counter("seckill_optimistic_retries_total", "Version-guarded writes retried after a concurrent change, by strategy."),
		batches: histogram("seckill_batch_orders",
			"Orders placed together by one critical section under group commit, by strategy: the lock and the write they share.",
			prometheus.ExponentialBuckets(1, 2, 8)),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "seckill_batch_queued_orders",
			Help: "Orders of this instance waiting for the next critical section of their product, which takes them together at its lock's grant, by strategy.",
		}, byStrategy),
		fencedOut: counter("seckill_fenced_out_total",
			"Writes refused by the database because a newer holder of the lock service's lock had written (never a sale), by strategy."),
		threshold: slowHold,
		log:       log,
	}
	reg.MustRegister(m.wait, m.hold, m.heldTooLong, m.lost, m.retries, m.batches, m.queued, m.fencedOut)
	return m
}

func (m *LockMetrics) waited(strategy string, d time.Duration) {
	m.wait.WithLabelValues(strategy).Observe(d.Seconds())
}

func (m *LockMetrics) held(strategy, key string, d time.Duration) {
	m.hold.WithLabelValues(strategy).Observe(d.Seconds())
	if d > m.threshold {
		m.heldTooLong.WithLabelValues(strategy).Inc()
		m.log.Warn("lock held longer than threshold", "strategy", strategy, "key", key, "held", d, "threshold", m.threshold)
	}
}

func (m *LockMetrics) lostAt(strategy, key string) {
	m.lost.WithLabelValues(strategy).Inc()
	m.log.Warn("lock was lost while held; the version guard or the fence kept the write safe", "strategy", strategy, "key", key)
}

func (m *LockMetrics) retried(strategy string) { m.retries.WithLabelValues(strategy).Inc() }

func (m *LockMetrics) fenced(strategy string) { m.fencedOut.WithLabelValues(strategy).Inc() }

// enqueued counts orders joining (n > 0) or leaving (n < 0) their product's queue for a section.
func (m *LockMetrics) enqueued(strategy string, n int) {
	m.queued.WithLabelValues(strategy).Add(float64(n))
}

func (m *LockMetrics) batched(strategy string, orders int) {
	m.batches.WithLabelValues(strategy).Observe(float64(orders))
}
