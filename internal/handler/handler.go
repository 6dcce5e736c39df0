// Package handler is the HTTP face of the service — the contract is openapi.yaml beside it,
// served at /openapi.yaml: gin routes, request validation, the single table that maps error
// codes to statuses, and the sale page with its live events (page.go). It never touches a
// backend directly: everything goes through the service.
package handler

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flashsale/seckill/internal/feed"
	"github.com/flashsale/seckill/internal/frontdoor"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// Sales runs sale rounds, places and reads orders; *service.Service implements it.
type Sales interface {
	// Resolve names the strategy for a request that asked for requested ("" = default), or
	// returns a *stock.InvalidError.
	Resolve(requested string) (string, error)
	// Place places an order (a request of one line, stock.OrderOf) or a checkout, every line or
	// none; replayed is true when an Idempotency-Key found the original.
	Place(ctx context.Context, req stock.CheckoutRequest) (co stock.Checkout, replayed bool, err error)
	// PutProduct starts a sale round, keeping state outside the database in step.
	PutProduct(ctx context.Context, spec stock.ProductSpec) (stock.Product, error)
	// Product reads the database.
	Product(ctx context.Context, sku string) (stock.Product, error)
	// Products lists up to limit products, by SKU.
	Products(ctx context.Context, limit int) ([]stock.Product, error)
	// Read reads an order or a checkout (an order's answer is its checkout of one line): the
	// database, and for one of the queued strategy with no row yet, the order queue's record.
	Read(ctx context.Context, ref stock.Ref) (stock.Checkout, error)
	// Wait is Read, held while it is queued, for at most wait.
	Wait(ctx context.Context, ref stock.Ref, wait time.Duration) (stock.Checkout, error)
	// Pay confirms the buyer's pending order or checkout (every line at once); Cancel cancels
	// the buyer's, or anyone's for an empty userID (the admin).
	Pay(ctx context.Context, ref stock.Ref, userID string) (stock.Checkout, error)
	Cancel(ctx context.Context, ref stock.Ref, userID string) (stock.Checkout, error)
	// Audit reports the product's consistency.
	Audit(ctx context.Context, sku string) (service.Audit, error)
	// Reconcile rebuilds state outside the database from it, then audits.
	Reconcile(ctx context.Context, sku string) (service.Audit, error)
	// Locks names where the strategies lock the product, and its admission keys.
	Locks(sku string) service.Locks
	// Checks are the backends /readyz asks.
	Checks() []service.Check
}

// Config is what the handler needs.
type Config struct {
	Sales      Sales
	AdminToken string
	Log        *slog.Logger
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// RateLimit limits each client's requests to the API (not the service endpoints); zero: off.
	RateLimit RateLimit
	// TrustedProxies are the proxies whose X-Forwarded-For names the client (CIDRs or
	// addresses); none by default, so a client cannot claim another's address.
	TrustedProxies []string
	// Door is the front door (docs/frontdoor.md): buyer identity, the per-buyer limit, the rooms.
	Door Door
	// Events feed the sale page's live figures; nil answers the events unavailable.
	Events *feed.Hub
}

// Door is the front door's parts, built on the deployment's Redis. A nil Buyers trusts a body's
// user_id; a nil Limit limits no buyer; a nil Room answers a waiting room's routes unavailable.
// Passes are the service's to check (service.Parts.Passes): once, for every line of a request.
type Door struct {
	Buyers *frontdoor.Verifier
	Limit  *frontdoor.Limiter
	Room   *frontdoor.Room
}

// openAPI is the contract of the HTTP API, served as it is.
//
//go:embed openapi.yaml
var openAPI []byte

// maxBodyBytes is the request body limit of the contract.
const maxBodyBytes = 4 << 10

type handler struct {
	Config
	pages    *pages
	adminSum [sha256.Size]byte // of AdminToken (isAdmin)
	soldOut  *soldOutAnswers
}

// New returns the service's HTTP handler.
func New(cfg Config) (http.Handler, error) {
	// Release mode: gin's debug mode prints every route at start and warns on every request.
	gin.SetMode(gin.ReleaseMode)
	p, err := loadPages()
	if err != nil {
		return nil, fmt.Errorf("pages: %w", err)
	}
	h := &handler{Config: cfg, pages: p, adminSum: sha256.Sum256([]byte(cfg.AdminToken)),
		soldOut: &soldOutAnswers{bodies: map[string][]byte{}}}
	r := gin.New()
	r.HandleMethodNotAllowed = true
	if err := r.SetTrustedProxies(cfg.TrustedProxies); err != nil {
		return nil, fmt.Errorf("trusted proxies: %w", err)
	}
	// A body read past maxBodyBytes fails with *http.MaxBytesError.
	limitBody := func(c *gin.Context) { c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxBodyBytes) }
	r.Use(withRequestID(cfg.Log), newHTTPMetrics(cfg.Registerer).middleware(), withRecovery(cfg.Log), limitBody)

	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.GET("/readyz", h.ready)
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})))
	r.GET("/openapi.yaml", func(c *gin.Context) { c.Data(http.StatusOK, "application/yaml", openAPI) })
	r.GET("/", h.index)
	r.GET("/sale/:sku", h.salePage)

	v1 := r.Group("/api/v1")
	if cfg.RateLimit.Rate > 0 {
		v1.Use((&clientLimiter{limit: cfg.RateLimit, seen: map[string]*bucket{}}).middleware())
	}
	admin := h.requireAdmin
	v1.PUT("/products/:sku", admin, h.putProduct)
	v1.GET("/products/:sku", aboutProduct(h, Sales.Product, productJSON))
	v1.GET("/products/:sku/audit", admin, aboutProduct(h, Sales.Audit, auditJSON))
	v1.POST("/products/:sku/reconcile", admin, aboutProduct(h, Sales.Reconcile, auditJSON))
	v1.GET("/products/:sku/locks", admin, h.locks)
	v1.GET("/products/:sku/events", h.events)
	// Orders are placed per product and answer contract.Order; checkouts name their products in
	// their lines and answer contract.Checkout.
	orders := kind{handler: h, name: "order", param: "order_id", path: "/api/v1/orders/", reply: orderReply}
	checkouts := kind{handler: h, name: "checkout", param: "checkout_id", path: "/api/v1/checkouts/", checkout: true, reply: checkoutReply}
	buyerOnly, buyerOrAdmin := h.buyerDoor(false), h.buyerDoor(true)
	v1.POST("/products/:sku/queue", buyerOnly, h.join)
	v1.GET("/products/:sku/queue/:ticket", buyerOnly, h.poll)
	v1.POST("/products/:sku/orders", buyerOnly, orders.place)
	v1.GET("/orders/:order_id", buyerOnly, orders.get)
	v1.POST("/orders/:order_id/pay", buyerOnly, orders.pay)
	v1.POST("/orders/:order_id/cancel", buyerOrAdmin, orders.cancel)
	v1.POST("/checkouts", buyerOnly, checkouts.place)
	v1.GET("/checkouts/:checkout_id", buyerOnly, checkouts.get)
	v1.POST("/checkouts/:checkout_id/pay", buyerOnly, checkouts.pay)
	v1.POST("/checkouts/:checkout_id/cancel", buyerOrAdmin, checkouts.cancel)

	r.NoRoute(func(c *gin.Context) { fail(c, stock.ErrNotFound, "route "+c.Request.URL.Path) })
	r.NoMethod(func(c *gin.Context) { fail(c, errMethodNotAllowed, c.Request.Method+" "+c.Request.URL.Path) })
	return r, nil
}

// ready answers 200 when every backend answers, else 503 naming the ones that are down.
func (h *handler) ready(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	status, down := map[string]string{}, ""
	for _, check := range h.Sales.Checks() {
		status[check.Name] = "ok"
		if err := check.Ping(ctx); err != nil {
			status[check.Name] = "down"
			down += " " + check.Name
			requestLogger(h.Log, c).Warn("backend not ready", "backend", check.Name, "err", err)
		}
	}
	if down != "" {
		c.Header("Retry-After", retryAfterSeconds)
		c.JSON(http.StatusServiceUnavailable, gin.H{
			"error":    errorDetail{Code: "unavailable", Message: "not ready; down:" + down},
			"backends": status,
		})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready", "backends": status})
}

func (h *handler) putProduct(c *gin.Context) {
	sku, ok := skuParam(c)
	if !ok {
		return
	}
	var body productBody
	if !decode(c, &body) {
		return
	}
	spec, err := body.spec(sku)
	if err != nil {
		fail(c, err, "")
		return
	}
	p, err := h.Sales.PutProduct(c.Request.Context(), spec)
	if err != nil {
		fail(c, err, "product "+sku)
		return
	}
	// A new sale round starts with an empty line, or the old round's tickets would be admitted
	// first and at the old rate. The round is stored already: a failed PUT is safe to repeat.
	if h.Door.Room != nil {
		if err := h.Door.Room.Reset(c.Request.Context(), sku); err != nil {
			fail(c, err, "product "+sku)
			return
		}
	}
	c.JSON(http.StatusOK, productJSON(p))
}

// aboutProduct answers what read says of the path's product, as reply shows it: a GET of the
// product, its audit, a reconcile of its Redis admission state from the database.
func aboutProduct[T, J any](h *handler, read func(Sales, context.Context, string) (T, error), reply func(T) J) gin.HandlerFunc {
	return func(c *gin.Context) {
		sku, ok := skuParam(c)
		if !ok {
			return
		}
		got, err := read(h.Sales, c.Request.Context(), sku)
		if err != nil {
			fail(c, err, "product "+sku)
			return
		}
		c.JSON(http.StatusOK, reply(got))
	}
}

// locks names the product's locks and admission keys: names only, read from the code, so the
// product need not exist and no backend is asked.
func (h *handler) locks(c *gin.Context) {
	sku, ok := skuParam(c)
	if !ok {
		return
	}
	c.JSON(http.StatusOK, locksJSON(sku, h.Sales.Locks(sku)))
}

// A kind is orders or checkouts, as the one handler of each verb (place, get, pay, cancel) needs to
// know it: below the handler, an order is a checkout of one line.
type kind struct {
	*handler
	name     string // what answers call one: "order"
	param    string // the path parameter of its id: "order_id"
	path     string // its Location, but for the id
	checkout bool   // whether its ids are checkouts' (stock.Ref)
	reply    func(stock.Checkout) (id string, status stock.Status, json any)
}

// place places one: 201 with it, or 202 and its Location while it is queued.
func (k kind) place(c *gin.Context) {
	sku, ok := "", true
	var body placeBody
	if k.checkout {
		body = &checkoutBody{}
	} else if sku, ok = skuParam(c); ok {
		body = &orderBody{sku: sku}
	}
	if !ok {
		return
	}
	key, ok := idempotencyKey(c)
	if !ok || !decode(c, body) {
		return
	}
	req, err := body.request(c, key, k.Sales)
	if err != nil {
		fail(c, err, "")
		return
	}
	req.Pass = c.GetHeader(passHeader)
	placed, _, err := k.Sales.Place(c.Request.Context(), req)
	switch {
	case err != nil && sku != "" && stock.Code(err) == "sold_out":
		k.soldOut.answer(c, sku)
		return
	case err != nil && sku != "":
		fail(c, err, "product "+sku)
		return
	case err != nil:
		fail(c, err, "checkout")
		return
	}
	id, status, json := k.reply(placed)
	if status == stock.Queued {
		// Accepted, not yet written: the buyer follows it at its Location.
		c.Header("Location", k.path+id)
		c.JSON(http.StatusAccepted, json)
		return
	}
	c.JSON(http.StatusCreated, json)
}

// get reads one; with ?wait= it holds the answer while one is queued.
func (k kind) get(c *gin.Context) {
	id, ok := k.id(c)
	if !ok {
		return
	}
	wait, err := waitParam(c)
	if err != nil {
		fail(c, err, "")
		return
	}
	var one stock.Checkout
	if wait > 0 {
		one, err = k.Sales.Wait(c.Request.Context(), k.ref(id), wait)
	} else {
		one, err = k.Sales.Read(c.Request.Context(), k.ref(id))
	}
	if err == nil && !owns(c, one) {
		err = stock.ErrNotFound // another buyer's: as if there were none
	}
	k.answer(c, id, one, err)
}

// pay is the payment provider's callback: the buyer's pending order or checkout (every line at
// once) is confirmed.
func (k kind) pay(c *gin.Context) {
	id, ok := k.id(c)
	if !ok {
		return
	}
	user, ok := buyer(c, false)
	if !ok {
		return
	}
	one, err := k.Sales.Pay(c.Request.Context(), k.ref(id), user)
	k.answer(c, id, one, err)
}

// cancel cancels the buyer's order or checkout (every line at once), or — with the admin token —
// anyone's.
func (k kind) cancel(c *gin.Context) {
	id, ok := k.id(c)
	if !ok {
		return
	}
	admin, err := k.isAdmin(c)
	if _, authed := authenticated(c); err != nil && !authed {
		fail(c, err, "")
		return
	}
	user, ok := buyer(c, admin)
	if !ok {
		return
	}
	one, err := k.Sales.Cancel(c.Request.Context(), k.ref(id), user)
	k.answer(c, id, one, err)
}

// id validates the path's id: anything but a ULID is an unknown one.
func (k kind) id(c *gin.Context) (string, bool) {
	id := c.Param(k.param)
	if !orderIDPattern.MatchString(id) {
		fail(c, stock.ErrNotFound, k.name)
		return "", false
	}
	return id, true
}

// ref names the one of this kind with id.
func (k kind) ref(id string) stock.Ref { return stock.Ref{ID: id, Checkout: k.checkout} }

// answer answers one read, paid or cancelled, or the error that came instead.
func (k kind) answer(c *gin.Context, id string, one stock.Checkout, err error) {
	if err != nil {
		fail(c, err, k.name+" "+id)
		return
	}
	_, _, json := k.reply(one)
	c.JSON(http.StatusOK, json)
}
