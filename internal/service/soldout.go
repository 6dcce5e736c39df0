package service

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/seckill/internal/stock"
)

// ResetChannel carries product resets to every instance (Redis pub/sub): the payload is the SKU
// whose local sold-out flags must go.
const ResetChannel = "seckill:products:reset"

// Resets is the reset channel as the flags use it (redisclient.Channel): publish a SKU, read the
// next one ("" for a sign of life; a timeout error whose Timeout() is true), ping, close.
type Resets interface {
	Publish(ctx context.Context, sku string) error
	Receive(ctx context.Context, timeout time.Duration) (string, error)
	Ping(ctx context.Context) error
	Close() error
}

// maxFlagBuyers bounds the buyers a flag remembers (a few MB); a bigger sale is not flagged.
const maxFlagBuyers = 100_000

// SoldOut is one instance's local sold-out flags: once the database shows a product at zero,
// sold_out is answered from memory, without Redis or the database, for the requests that
// outnumber a flash sale's units many times.
//
// A flag can be trusted because stock comes back only by a PUT or an ended order, and both drop
// it and publish the SKU to every instance. It keeps the buyers who hold an order, so their
// retries reach their original 201. Flags live only while the subscription is up (messages sent
// while down are lost), and for at most TTL, then a one-row read renews (same version) or drops it.
type SoldOut struct {
	store  *stock.Store
	resets Resets
	ttl    time.Duration
	log    *slog.Logger

	rejections prometheus.Counter
	subscribed prometheus.Gauge
	onReset    func(sku string) // told of every reset heard, for other local knowledge of products

	mu       sync.RWMutex
	live     bool   // the reset subscription is up
	gen      uint64 // bumped by every reset and every subscription change: a learn that spans one does not set its flag
	flags    map[string]*soldOutFlag
	learning map[string]time.Time // SKUs being learned, or when they were last

	stop context.CancelFunc
	wg   sync.WaitGroup
}

type soldOutFlag struct {
	version     int64
	maxPerOrder int
	buyers      map[string]struct{}
	checked     time.Time
}

// newSoldOut starts the flags of one instance, hearing product resets on resets. ttl bounds how
// long a flag is trusted unchecked; onReset hears every reset. Close stops it.
func newSoldOut(resets Resets, store *stock.Store, ttl time.Duration, onReset func(sku string), log *slog.Logger,
	reg prometheus.Registerer) *SoldOut {
	ctx, cancel := context.WithCancel(context.Background())
	s := &SoldOut{
		store: store, resets: resets, ttl: ttl, onReset: onReset, log: log, stop: cancel,
		flags: map[string]*soldOutFlag{}, learning: map[string]time.Time{},
		rejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_sold_out_flag_rejections_total",
			Help: "Orders answered sold_out from this instance's local sold-out flag, without Redis or the database.",
		}),
		subscribed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seckill_sold_out_flag_subscribed",
			Help: "1 while this instance hears product resets, so its sold-out flags may be used.",
		}),
	}
	reg.MustRegister(s.rejections, s.subscribed)
	s.wg.Go(func() { s.listen(ctx) })
	return s
}

// Close stops listening and waits for learns in flight.
func (s *SoldOut) Close() error {
	s.stop()
	err := s.resets.Close() // wakes the listener from its read
	s.wg.Wait()
	return err
}

// rejects answers req from the flag: a *stock.SoldOutError when its product is flagged and the
// buyer holds no order, nil when the order must take the full path.
func (s *SoldOut) rejects(req stock.OrderRequest) error {
	s.mu.RLock()
	f := s.flags[req.SKU]
	s.mu.RUnlock()
	if f == nil || time.Since(f.checked) > s.ttl || req.Quantity > f.maxPerOrder {
		return nil
	}
	if _, bought := f.buyers[req.UserID]; bought {
		return nil
	}
	s.rejections.Inc()
	return &stock.SoldOutError{SKU: req.SKU, Left: 0, Asked: req.Quantity}
}

// learn hears that an order for sku was answered sold_out and checks in the background whether
// to flag it: one check per SKU at a time, at most ten a second.
func (s *SoldOut) learn(sku string) {
	s.mu.Lock()
	last, busy := s.learning[sku]
	if !s.live || (busy && (last.IsZero() || time.Since(last) < 100*time.Millisecond)) {
		s.mu.Unlock()
		return
	}
	s.learning[sku] = time.Time{}
	gen := s.gen
	s.mu.Unlock()
	s.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		f, err := s.check(ctx, sku)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.learning[sku] = time.Now()
		switch {
		case err != nil:
			s.log.Debug("sold-out flag not learned", "sku", sku, "err", err)
		case f != nil && s.live && s.gen == gen:
			s.flags[sku] = f
		}
	})
}

// check reads whether sku is at zero stock and, if so, its buyers: the flag to set, or nil.
func (s *SoldOut) check(ctx context.Context, sku string) (*soldOutFlag, error) {
	before, err := s.store.Product(ctx, sku)
	if err != nil || before.Stock != 0 {
		return nil, err
	}
	s.mu.RLock()
	known := s.flags[sku]
	s.mu.RUnlock()
	if known != nil && known.version == before.Version {
		return &soldOutFlag{version: known.version, maxPerOrder: known.maxPerOrder, buyers: known.buyers, checked: time.Now()}, nil
	}
	if before.Sold() > maxFlagBuyers {
		return nil, nil
	}
	users, err := s.store.Buyers(ctx, sku)
	if err != nil {
		return nil, err
	}
	// A PUT between the two reads would make the buyers those of another round; the version
	// moves with every PUT.
	after, err := s.store.Product(ctx, sku)
	if err != nil || after.Version != before.Version || after.Stock != 0 {
		return nil, err
	}
	buyers := make(map[string]struct{}, len(users))
	for _, u := range users {
		buyers[u] = struct{}{}
	}
	return &soldOutFlag{version: before.Version, maxPerOrder: before.MaxPerOrder, buyers: buyers, checked: time.Now()}, nil
}

// Reset drops sku's flag on every instance: the product was reset, or units came back. A failed
// publish is logged, not returned: other instances' flags expire within the TTL.
func (s *SoldOut) Reset(ctx context.Context, sku string) {
	s.drop(sku)
	if err := s.resets.Publish(ctx, sku); err != nil {
		s.log.Warn("product reset not published; other instances' sold-out flags expire by their TTL",
			"sku", sku, "ttl", s.ttl, "err", err)
	}
}

func (s *SoldOut) drop(sku string) {
	s.mu.Lock()
	s.gen++
	delete(s.flags, sku)
	s.mu.Unlock()
}

// setLive records whether resets are heard. Any change drops every flag: resets may have been
// missed while the subscription was down.
func (s *SoldOut) setLive(live bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == live {
		return
	}
	s.live = live
	s.gen++
	clear(s.flags)
	if live {
		s.subscribed.Set(1)
	} else {
		s.subscribed.Set(0)
		s.log.Warn("product resets not heard; local sold-out flags off until Redis is back")
	}
}

// sweep forgets flags and learns nobody asked about for a while, so that a long run of sales
// does not accumulate them.
func (s *SoldOut) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	stale := func(t time.Time) bool { return !t.IsZero() && time.Since(t) > 10*s.ttl }
	maps.DeleteFunc(s.flags, func(_ string, f *soldOutFlag) bool { return stale(f.checked) })
	maps.DeleteFunc(s.learning, func(_ string, last time.Time) bool { return stale(last) })
}

// listen holds the reset subscription until Close. A connection silent for a second (or TTL) is
// pinged; a second silence, or any error, counts as down until Redis answers again.
func (s *SoldOut) listen(ctx context.Context) {
	silent := 0
	for ctx.Err() == nil {
		sku, err := s.resets.Receive(ctx, min(s.ttl, time.Second))
		var timeout interface{ Timeout() bool }
		switch {
		case ctx.Err() != nil:
			return // Close: the subscription ended on purpose, not Redis
		case err == nil:
			silent = 0
			s.setLive(true)
			if sku != "" {
				s.drop(sku)
				s.onReset(sku)
			}
		case errors.As(err, &timeout) && timeout.Timeout():
			silent++
			if silent > 1 {
				s.setLive(false)
			}
			s.sweep()
			_ = s.resets.Ping(ctx) // its answer, or the error, arrives through ReceiveTimeout
		default:
			s.setLive(false)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}
