package lock

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what locks do outside their sections' sight — extensions, release wake-ups,
// waits, sessions — labelled by the strategy that uses them. The section's own metrics (wait,
// hold, lost, retries) are package lockstrategy's.
type Metrics struct {
	extensions *prometheus.CounterVec
	wakeups    *prometheus.CounterVec
	waiting    *prometheus.GaugeVec
	sessions   *prometheus.CounterVec
	log        *slog.Logger
}

// NewMetrics registers the locks' metrics on reg; refused extensions are logged on log.
func NewMetrics(reg prometheus.Registerer, log *slog.Logger) *Metrics {
	m := &Metrics{
		extensions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_lock_extensions_total", Help: "Lock expiries extended by a watchdog while a section ran, by strategy.",
		}, []string{"strategy"}),
		wakeups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_lock_release_wakeups_total",
			Help: "Lock waits ended by the holder's release message rather than by the next poll, by strategy.",
		}, []string{"strategy"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "seckill_lock_waiting_sections",
			Help: "Critical sections of this instance that found their Redis lock taken and wait for its release message or their next poll, by strategy.",
		}, []string{"strategy"}),
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_etcd_sessions_total",
			Help: "etcd sessions (leases) created: the first, and one after every session loss, by strategy.",
		}, []string{"strategy"}),
		log: log,
	}
	reg.MustRegister(m.extensions, m.wakeups, m.waiting, m.sessions)
	return m
}

// For returns the observer of strategy's lock.
func (m *Metrics) For(strategy string) Observer { return Observer{m: m, strategy: strategy} }

// An Observer records what one strategy's lock does, on Metrics. A backend is given one at
// construction; the zero Observer records nothing.
type Observer struct {
	m        *Metrics
	strategy string
}

// Extended counts an expiry pushed out by a watchdog.
func (o Observer) Extended() {
	if o.m != nil {
		o.m.extensions.WithLabelValues(o.strategy).Inc()
	}
}

// Refused logs an extension refused: the section holding key is abandoned.
func (o Observer) Refused(key string, err error) {
	if o.m != nil {
		o.m.log.Warn("lock extension failed; abandoning the critical section", "strategy", o.strategy, "key", key, "err", err)
	}
}

// Woken counts a wait ended by the holder's release message rather than by the next poll.
func (o Observer) Woken() {
	if o.m != nil {
		o.m.wakeups.WithLabelValues(o.strategy).Inc()
	}
}

// Waiting counts a section that waits for a taken lock (+1), until it stops waiting (-1).
func (o Observer) Waiting(n int) {
	if o.m != nil {
		o.m.waiting.WithLabelValues(o.strategy).Add(float64(n))
	}
}

// SessionStarted counts an etcd session (a lease) created.
func (o Observer) SessionStarted() {
	if o.m != nil {
		o.m.sessions.WithLabelValues(o.strategy).Inc()
	}
}
