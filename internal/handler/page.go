package handler

import (
	"bytes"
	"embed"
	"errors"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/seckill/internal/feed"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// The sale page and the index are files in the binary: no build step and no third-party host,
// so a machine with no internet serves them (docs/frontdoor.md, "The sale page").
//
//go:embed page
var pageFiles embed.FS

// pages are the parsed templates and the style and script they inline.
type pages struct {
	sale, index *template.Template
	css         template.CSS
	script      template.JS
}

// offsetLine is the script's line that takes the server's clock; the planted browser-clock bug
// replaces it.
const offsetLine = "const offset = Number(page.dataset.serverNow) - Date.now();"

func loadPages() (*pages, error) {
	read := func(name string) ([]byte, error) { return pageFiles.ReadFile("page/" + name) }
	css, err := read("sale.css")
	if err != nil {
		return nil, err
	}
	script, err := read("sale.js")
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(script, []byte(offsetLine)) {
		return nil, errors.New("sale.js: the server's clock offset line is missing")
	}
	if planted.On(planted.BrowserClock) {
		script = bytes.Replace(script, []byte(offsetLine), []byte("const offset = 0;"), 1)
	}
	p := &pages{css: template.CSS(css), script: template.JS(script)}
	if p.sale, err = template.ParseFS(pageFiles, "page/sale.html"); err != nil {
		return nil, err
	}
	if p.index, err = template.ParseFS(pageFiles, "page/index.html"); err != nil {
		return nil, err
	}
	return p, nil
}

// productView is a product as the pages show it, its figures as of the server's now.
type productView struct {
	SKU, Name                 string
	Stock, InitialStock, Sold int64
	MaxPerOrder               int
	State, StateWords         string
	StartsAt, StartsAtWords   string
	EndsAt, EndsAtWords       string
	Room                      bool
	ServerNow                 int64 // unix milliseconds: the page's countdown runs on it
	ServerTime                string
	Identity                  string // "name", or "token" where buyers are authenticated
	CSS                       template.CSS
	Script                    template.JS
}

// stateWords are the states as a buyer reads them.
var stateWords = map[string]string{
	feed.Upcoming: "Not on sale yet", feed.Open: "On sale", feed.SoldOut: "Sold out", feed.Ended: "The sale has ended",
}

func viewOf(p stock.Product, now time.Time) productView {
	f := feed.Of(p, now)
	v := productView{SKU: p.SKU, Name: p.Name, Stock: f.Stock, InitialStock: p.InitialStock, Sold: f.Sold,
		MaxPerOrder: p.MaxPerOrder, State: f.State, StateWords: stateWords[f.State], Room: p.WaitingRoom != nil,
		ServerNow: now.UnixMilli(), ServerTime: now.UTC().Format(time.RFC1123)}
	if !p.Window.Starts.IsZero() {
		v.StartsAt, v.StartsAtWords = p.Window.Starts.Format(time.RFC3339Nano), p.Window.Starts.Format(time.RFC1123)
	}
	if !p.Window.Ends.IsZero() {
		v.EndsAt, v.EndsAtWords = p.Window.Ends.Format(time.RFC3339Nano), p.Window.Ends.Format(time.RFC1123)
	}
	return v
}

// salePage answers a buyer's page of one product.
func (h *handler) salePage(c *gin.Context) {
	sku := c.Param("sku")
	if !validSKU(sku) {
		pageError(c, http.StatusNotFound, "No such product.")
		return
	}
	p, err := h.Sales.Product(c.Request.Context(), sku)
	switch {
	case errors.Is(err, stock.ErrNotFound):
		pageError(c, http.StatusNotFound, "No product "+sku+".")
		return
	case err != nil:
		requestLogger(h.Log, c).Error("sale page: product not read", "sku", sku, "err", err)
		pageError(c, http.StatusServiceUnavailable, "The sale cannot be read right now. Try again shortly.")
		return
	}
	v := viewOf(p, time.Now())
	v.Identity, v.CSS, v.Script = "name", h.pages.css, h.pages.script
	if h.Door.Buyers != nil {
		v.Identity = "token"
	}
	h.render(c, h.pages.sale, v)
}

// indexSize is the most products the index lists.
const indexSize = 100

// index lists the products with links to their pages; with none, it says how to start a sale.
func (h *handler) index(c *gin.Context) {
	ps, err := h.Sales.Products(c.Request.Context(), indexSize)
	if err != nil {
		requestLogger(h.Log, c).Error("index: products not read", "err", err)
		pageError(c, http.StatusServiceUnavailable, "The sales cannot be read right now. Try again shortly.")
		return
	}
	now := time.Now()
	views := make([]productView, len(ps))
	for i, p := range ps {
		views[i] = viewOf(p, now)
	}
	scheme := "http"
	if c.Request.TLS != nil {
		scheme = "https"
	}
	h.render(c, h.pages.index, map[string]any{"Products": views, "CSS": h.pages.css, "Base": scheme + "://" + c.Request.Host})
}

// render writes one page. Rendered first, then sent: a template that fails sends no half page.
func (h *handler) render(c *gin.Context, t *template.Template, data any) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		requestLogger(h.Log, c).Error("page not rendered", "err", err)
		pageError(c, http.StatusInternalServerError, "The page could not be shown.")
		return
	}
	c.Header("Cache-Control", "no-store") // the figures and the server's time are of this moment
	c.Data(http.StatusOK, "text/html; charset=utf-8", buf.Bytes())
}

// pageError answers a page's error as a short page of its own.
func pageError(c *gin.Context, status int, message string) {
	if status == http.StatusServiceUnavailable {
		c.Header("Retry-After", retryAfterSeconds)
	}
	body := "<!doctype html><meta charset=\"utf-8\"><title>seckill</title><p>" + template.HTMLEscapeString(message) +
		"</p><p><a href=\"/\">All sales</a></p>\n"
	c.Data(status, "text/html; charset=utf-8", []byte(body))
}

// keepAlive is how often a quiet event stream sends a comment, so that proxies keep it open.
const keepAlive = 15 * time.Second

// eventWrite bounds one write of an event stream: a watcher that does not read is dropped
// when its connection's buffers are full, not waited for.
const eventWrite = 5 * time.Second

// events streams a product's live figures as Server-Sent Events (event: stock), from this
// instance's one feed of the product.
func (h *handler) events(c *gin.Context) {
	sku, ok := skuParam(c)
	if !ok {
		return
	}
	if h.Events == nil {
		fail(c, stock.ErrUnavailable, "product "+sku)
		return
	}
	w, err := h.Events.Watch(c.Request.Context(), sku)
	if err != nil {
		fail(c, eventsError(err), "product "+sku)
		return
	}
	defer w.Close()
	rc := http.NewResponseController(c.Writer)
	c.Header("Content-Type", "text/event-stream")
	c.Header("Cache-Control", "no-store")
	c.Header("X-Accel-Buffering", "no") // nginx would otherwise hold the events back
	c.Status(http.StatusOK)
	write := func(b []byte) bool {
		// The server's WriteTimeout would end a stream at 30 s: each write gets a deadline of
		// its own instead. A recorder in tests has none to set.
		_ = rc.SetWriteDeadline(time.Now().Add(eventWrite))
		if _, err := c.Writer.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	quiet := time.NewTicker(keepAlive)
	defer quiet.Stop()
	for {
		select {
		case <-c.Request.Context().Done():
			return
		case <-w.Done():
			return // dropped, or the instance is stopping
		case <-quiet.C:
			if !write([]byte(": keep-alive\n\n")) {
				return
			}
		case <-w.Changed():
			f := w.Take()
			line := "event: stock\ndata: {\"stock\":" + strconv.FormatInt(f.Stock, 10) + ",\"sold\":" +
				strconv.FormatInt(f.Sold, 10) + ",\"state\":\"" + f.State + "\"}\n\n"
			if !write([]byte(line)) {
				return
			}
		}
	}
}

// eventsError is a refused watch as the error table reads it.
func eventsError(err error) error {
	if errors.Is(err, feed.ErrFull) || errors.Is(err, feed.ErrClosed) {
		return errors.Join(stock.ErrUnavailable, err)
	}
	return err
}
