// Package feed is the sale page's live figures (docs/frontdoor.md, "The sale page"): per product,
// one reader per instance that reads the product's row every tick while anyone watches it, and
// hands each change to every watcher. However many buyers watch a product, the database sees one
// one-row read a tick from each instance, and a sale on any instance shows on every other within
// a tick: all of them read the same row.
package feed

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// The states of a sale, as the events name them.
const (
	Upcoming = "upcoming"
	Open     = "open"
	SoldOut  = "sold_out"
	Ended    = "ended"
)

// Figures are what a watcher is sent: the units left and sold, and the sale's state.
type Figures struct {
	Stock int64  `json:"stock"`
	Sold  int64  `json:"sold"`
	State string `json:"state"`
}

// Of is the figures of p at now: before its start upcoming, with no unit left sold_out, after
// its end ended, else open.
func Of(p stock.Product, now time.Time) Figures {
	f := Figures{Stock: max(0, p.Stock), Sold: p.Sold(), State: Open}
	switch {
	case !p.Window.Starts.IsZero() && now.Before(p.Window.Starts):
		f.State = Upcoming
	case p.Stock <= 0:
		f.State = SoldOut
	case !p.Window.Ends.IsZero() && !now.Before(p.Window.Ends):
		f.State = Ended
	}
	return f
}

// Products reads a product's row; *service.Service implements it. It returns stock.ErrNotFound
// for an unknown product.
type Products interface {
	Product(ctx context.Context, sku string) (stock.Product, error)
}

// ErrFull is returned by Watch when the instance has as many watchers as it takes.
var ErrFull = errors.New("too many watchers")

// ErrClosed is returned by Watch once the hub is closed (the instance is stopping).
var ErrClosed = errors.New("feed closed")

// Options are a hub's settings; the zero value of each is its default.
type Options struct {
	Max  int           // the most watchers at once on this instance; 0: DefaultMax
	Tick time.Duration // how often a watched product is read; 0: DefaultTick
	// Behind is how many changes in a row a watcher may leave untaken before it is dropped; 0:
	// DefaultBehind.
	Behind int
	Now    func() time.Time // the clock that says a sale's state; nil: time.Now
}

// The defaults of Options.
const (
	DefaultMax    = 10_000
	DefaultTick   = 250 * time.Millisecond
	DefaultBehind = 4
)

func (o Options) withDefaults() Options {
	if o.Max <= 0 {
		o.Max = DefaultMax
	}
	if o.Tick <= 0 {
		o.Tick = DefaultTick
	}
	if o.Behind <= 0 {
		o.Behind = DefaultBehind
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Hub is one instance's feeds, one per watched product. It is safe for concurrent use.
type Hub struct {
	products Products
	opts     Options
	log      *slog.Logger

	watching prometheus.Gauge
	reads    prometheus.Counter
	dropped  prometheus.Counter

	mu       sync.Mutex
	feeds    map[string]*productFeed
	watchers int
	seq      int
	closed   bool
	wg       sync.WaitGroup
}

// New returns the hub of one instance, reading products through products.
func New(products Products, opts Options, log *slog.Logger, reg prometheus.Registerer) *Hub {
	h := &Hub{products: products, opts: opts.withDefaults(), log: log, feeds: map[string]*productFeed{},
		watching: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seckill_events_watchers", Help: "Sale-page watchers connected to this instance's product events.",
		}),
		reads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_events_reads_total", Help: "Reads of a watched product's row by this instance's feeds: one a tick per product, whatever the watchers.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_events_dropped_total", Help: "Watchers dropped for falling behind their feed: a slow watcher is dropped, never waited for.",
		}),
	}
	reg.MustRegister(h.watching, h.reads, h.dropped)
	return h
}

// A Watcher is one watcher of one product. Figures has its latest figures each time they change;
// Done is closed when the watcher is dropped (behind) or the hub closes.
type Watcher struct {
	hub    *Hub
	feed   *productFeed
	signal chan struct{} // a change not yet taken
	done   chan struct{}
	once   sync.Once

	mu     sync.Mutex
	latest Figures
	behind int // changes in a row the watcher left untaken
}

// Changed is signalled when there are figures to take (Take).
func (w *Watcher) Changed() <-chan struct{} { return w.signal }

// Done is closed when the watcher is dropped or the hub closes: the connection ends.
func (w *Watcher) Done() <-chan struct{} { return w.done }

// Take returns the latest figures.
func (w *Watcher) Take() Figures {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.behind = 0
	return w.latest
}

// Close stops watching; the last watcher of a product stops its feed.
func (w *Watcher) Close() { w.hub.leave(w) }

// productFeed reads one product for all its watchers.
type productFeed struct {
	key, sku string        // key: its entry in Hub.feeds
	ready    chan struct{} // closed after the first read: err or last is set
	err      error
	last     Figures
	watchers map[*Watcher]struct{}
	stop     context.CancelFunc
}

// Watch starts watching sku: the first figures are waiting on the watcher when it returns. It
// returns stock.ErrNotFound for an unknown product, ErrFull past the cap, ErrClosed after Close,
// or the first read's error.
func (h *Hub) Watch(ctx context.Context, sku string) (*Watcher, error) {
	w := &Watcher{hub: h, signal: make(chan struct{}, 1), done: make(chan struct{})}
	h.mu.Lock()
	switch {
	case h.closed:
		h.mu.Unlock()
		return nil, ErrClosed
	case h.watchers >= h.opts.Max:
		h.mu.Unlock()
		return nil, ErrFull
	}
	key := sku
	if planted.On(planted.FeedPerWatcher) {
		h.seq++
		key = sku + "\x00" + strconv.Itoa(h.seq) // a feed, and its reads, for every watcher
	}
	f := h.feeds[key]
	if f == nil {
		f = h.start(key, sku)
	}
	w.feed = f
	f.watchers[w] = struct{}{}
	h.watchers++
	h.watching.Inc()
	h.mu.Unlock()

	select {
	case <-f.ready:
	case <-ctx.Done():
		w.Close()
		return nil, ctx.Err()
	}
	// Under the hub's lock f.last is the latest: no change sent meanwhile is overtaken.
	h.mu.Lock()
	err := f.err
	if err == nil {
		w.send(f.last)
	}
	h.mu.Unlock()
	if err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// start starts the feed of sku under key; h.mu is held.
func (h *Hub) start(key, sku string) *productFeed {
	ctx, cancel := context.WithCancel(context.Background())
	f := &productFeed{key: key, sku: sku, ready: make(chan struct{}), watchers: map[*Watcher]struct{}{}, stop: cancel}
	h.feeds[key] = f
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.run(ctx, f)
	}()
	return f
}

// run reads f's product every tick until its last watcher leaves, and sends each change. A read
// that fails keeps the last figures: a watcher sees them unchanged rather than lose its page.
func (h *Hub) run(ctx context.Context, f *productFeed) {
	figures, err := h.read(ctx, f.sku)
	h.mu.Lock()
	f.err, f.last = err, figures
	if err != nil {
		// A feed that could not start serves nobody: the next watcher starts another.
		if h.feeds[f.key] == f {
			delete(h.feeds, f.key)
		}
	}
	h.mu.Unlock()
	close(f.ready)
	if err != nil {
		return
	}
	tick := time.NewTicker(h.opts.Tick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		figures, err := h.read(ctx, f.sku)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Debug("product events: read failed; keeping the last figures", "sku", f.sku, "err", err)
			}
			continue
		}
		h.mu.Lock()
		if figures != f.last {
			f.last = figures
			for w := range f.watchers {
				if !w.send(figures) {
					h.drop(w)
				}
			}
		}
		h.mu.Unlock()
	}
}

// read reads sku's figures.
func (h *Hub) read(ctx context.Context, sku string) (Figures, error) {
	ctx, cancel := context.WithTimeout(ctx, max(time.Second, 4*h.opts.Tick))
	defer cancel()
	h.reads.Inc()
	p, err := h.products.Product(ctx, sku)
	if err != nil {
		return Figures{}, err
	}
	return Of(p, h.opts.Now()), nil
}

// send hands f to w without waiting; false when w has left Behind changes in a row untaken.
func (w *Watcher) send(f Figures) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.latest = f
	select {
	case w.signal <- struct{}{}:
		return true
	default:
		w.behind++
		return w.behind < w.hub.opts.Behind
	}
}

// drop ends w, which fell behind; h.mu is held.
func (h *Hub) drop(w *Watcher) {
	h.dropped.Inc()
	h.remove(w)
}

// leave ends w at its own request.
func (h *Hub) leave(w *Watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.remove(w)
}

// remove ends w and, with it the last watcher, its feed; h.mu is held.
func (h *Hub) remove(w *Watcher) {
	f := w.feed
	if _, ok := f.watchers[w]; !ok {
		return
	}
	delete(f.watchers, w)
	h.watchers--
	h.watching.Dec()
	w.once.Do(func() { close(w.done) })
	if len(f.watchers) == 0 {
		f.stop()
		if h.feeds[f.key] == f {
			delete(h.feeds, f.key)
		}
	}
}

// Close ends every watcher and feed, and refuses new ones: an instance stopping closes its
// event streams at once, so that its drain waits only for the orders in flight.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	for _, f := range h.feeds {
		for w := range f.watchers {
			h.remove(w)
		}
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// Watching is how many watchers this instance has.
func (h *Hub) Watching() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.watchers
}
