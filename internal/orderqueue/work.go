package orderqueue

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Work runs one writer until ctx ends: it fetches up to max messages at a time (an idle fetch
// waits at most idle) and hands each product's to handle, the products of a fetch side by side.
// handle answers every delivery — Ack once every order of its batch is decided in the database
// or its record, Nak when one could not be decided — within timeout; while it works, the
// deliveries it has not answered yet are reported in progress every AckWait/3, so that a slow
// commit never hands a batch to a second writer, while a writer that stops (killed, frozen) loses
// its batches to the others within AckWait. Deliveries handle leaves unanswered go back to the
// queue after AckWait.
func (q *Queue) Work(ctx context.Context, max int, idle, timeout time.Duration, handle func(ctx context.Context, t Taken)) {
	for ctx.Err() == nil {
		taken, err := q.Fetch(ctx, max, idle)
		if err != nil {
			if ctx.Err() == nil {
				q.log.Debug("order queue: fetch failed; trying again", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(250 * time.Millisecond):
				}
			}
			continue
		}
		var wg sync.WaitGroup
		for _, t := range taken {
			for _, d := range t.Deliveries {
				if d.Deliveries > 1 {
					q.orders.WithLabelValues("redelivered").Add(float64(len(d.Batch.Orders)))
				}
			}
			wg.Go(func() { q.handle(ctx, t, timeout, handle) })
		}
		wg.Wait()
	}
}

// handle runs handle over t, reporting its unanswered deliveries in progress meanwhile.
func (q *Queue) handle(ctx context.Context, t Taken, timeout time.Duration, handle func(ctx context.Context, t Taken)) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(q.cfg.AckWait / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-hctx.Done():
				return
			case <-tick.C:
				for _, d := range t.Deliveries {
					if !d.answered() {
						_ = d.InProgress()
					}
				}
			}
		}
	}()
	handle(hctx, t)
	close(done)
}

// metrics are the queue's counters, and its backlog read at every scrape.
type metrics struct {
	q      *Queue
	depth  *prometheus.Desc
	oldest *prometheus.Desc
}

func newBatches() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "seckill_queue_batch_orders",
		Help:    "Orders per batch published: one message and one record, each one synced write, for all the orders one instance accepted for a product while its last publish was in flight.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 8),
	})
}

func newOrders() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_queue_orders_total",
		Help: "Queued orders by event: accepted (published, not a duplicate), placed and rejected (ended here), redelivered (handed to a writer again in its batch: the one before neither acked nor naked it), resent (in a batch recorded queued for long, put on the queue again: its message was lost).",
	}, []string{"event"})
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.depth
	ch <- m.oldest
}

// Collect implements prometheus.Collector: every product's backlog, read from the stream. A
// queue that does not answer within two seconds leaves the gauges out of this scrape.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	backlogs, err := m.q.Backlogs(ctx)
	if err != nil {
		m.q.log.Debug("order queue: backlog not read for the metrics", "err", err)
		return
	}
	now := time.Now()
	for _, b := range backlogs {
		ch <- prometheus.MustNewConstMetric(m.depth, prometheus.GaugeValue, float64(b.Depth), b.SKU)
		ch <- prometheus.MustNewConstMetric(m.oldest, prometheus.GaugeValue, max(0, now.Sub(b.Oldest).Seconds()), b.SKU)
	}
}

func (q *Queue) register(reg prometheus.Registerer) {
	reg.MustRegister(q.orders, q.batches, &metrics{
		q: q,
		depth: prometheus.NewDesc("seckill_queue_depth",
			"Messages in the queue, by product: batches of orders accepted and not yet acked by a writer, which acks each once every order in it is written or rejected.", []string{"sku"}, nil),
		oldest: prometheus.NewDesc("seckill_queue_oldest_age_seconds",
			"Age of the oldest batch waiting in the queue, by product: how far the writers are behind.", []string{"sku"}, nil),
	})
}
