package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/stock"
)

// strandedTimeout bounds one scrape's reads: a slow backend delays a scrape, never hangs it.
const strandedTimeout = 2 * time.Second

// stranded exports, per product and scrape, the units Redis admission holds back from the
// database's stock: they must come back on sale by themselves, as the README promises. Held back
// includes orders in flight, so no alert can use it; stranded units are those no live
// reservation explains, which the sweeper and the relay return within seconds: units that stay
// are the bug. The products are the sweeper's (Service.sweep), so the sku label stays small.
// Every instance reports the same value: aggregate with max by (sku), not sum.
type stranded struct {
	admission *admission.Ledger
	store     *stock.Store
	log       *slog.Logger
	heldBack  *prometheus.Desc
	stranded  *prometheus.Desc
}

func newStranded(ledger *admission.Ledger, store *stock.Store, log *slog.Logger) *stranded {
	return &stranded{admission: ledger, store: store, log: log,
		heldBack: prometheus.NewDesc("seckill_admission_held_back_units",
			"Units the database has that Redis admission does not offer (the audit's held_back): those of orders in flight, and any stranded.",
			[]string{"sku"}, nil),
		stranded: prometheus.NewDesc("seckill_admission_stranded_units",
			"Held-back units that no live reservation explains: reservations of an instance that stopped beating, units returned by the database and not yet relayed. The sweeper and the relay bring them back within seconds; units that stay are stranded stock.",
			[]string{"sku"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *stranded) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.heldBack
	ch <- c.stranded
}

// Collect implements prometheus.Collector. A product whose state cannot be read is left out, not
// reported as zero: a zero would say "nothing stranded" when nothing is known.
func (c *stranded) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), strandedTimeout)
	defer cancel()
	skus := c.admission.Recent(admission.RecentWindow) // the sweeper's: Recent prunes older ones
	if len(skus) == 0 {
		return
	}
	live, err := c.admission.Live(ctx) // once for the scrape, not once per product
	if err != nil {
		c.log.Debug("live instances not read; held-back units left out of this scrape", "err", err)
		return
	}
	for _, sku := range skus {
		held, stranded, err := c.read(ctx, sku, live)
		if err != nil {
			c.log.Debug("held-back units not read; left out of this scrape", "sku", sku, "err", err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.heldBack, prometheus.GaugeValue, float64(held), sku)
		ch <- prometheus.MustNewConstMetric(c.stranded, prometheus.GaugeValue, float64(stranded), sku)
	}
}

// read returns sku's held-back and stranded units. Redis is read first, so an order written in
// between makes them smaller, never larger. The other order would count its units twice, held by
// its reservation and then settled, and report stock stranded that is not.
func (c *stranded) read(ctx context.Context, sku string, live []string) (held, stranded int64, err error) {
	st, err := c.admission.State(ctx, sku, live)
	if err != nil {
		return 0, 0, err
	}
	product, err := c.store.Product(ctx, sku)
	if err != nil {
		return 0, 0, err
	}
	held = Audit{Audit: stock.Audit{Stock: product.Stock}, Redis: &st}.HeldBack()
	return held, max(0, held-st.Live), nil
}
