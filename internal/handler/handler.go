// Package handler is the HTTP face of the service — the contract is openapi.yaml beside it,
// served at /openapi.yaml: gin routes, request validation, and the single table that maps error
// codes to statuses. It never touches a backend directly: everything goes through the service.
package handler

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// Sales runs sale rounds, places and reads orders; *service.Service implements it.
type Sales interface {
	// Resolve names the strategy for a request that asked for requested ("" = default), or
	// returns a *stock.InvalidError.
	Resolve(requested string) (string, error)
	// PlaceOrder places req; replayed is true when an Idempotency-Key found the original order.
	PlaceOrder(ctx context.Context, req stock.OrderRequest) (order stock.Order, replayed bool, err error)
	// PutProduct starts a sale round, keeping state outside the database in step.
	PutProduct(ctx context.Context, spec stock.ProductSpec) (stock.Product, error)
	// Product and Order read the database (and, for an order of the queued strategy with no row
	// yet, the order queue's record).
	Product(ctx context.Context, sku string) (stock.Product, error)
	Order(ctx context.Context, orderID string) (stock.Order, error)
	// WaitOrder is Order, held while the order is queued, for at most wait.
	WaitOrder(ctx context.Context, orderID string, wait time.Duration) (stock.Order, error)
	// PayOrder confirms the buyer's pending order; CancelOrder cancels the buyer's order, or any
	// order for an empty userID (the admin).
	PayOrder(ctx context.Context, orderID, userID string) (stock.Order, error)
	CancelOrder(ctx context.Context, orderID, userID string) (stock.Order, error)
	// PlaceCheckout places a checkout, every line or none; replayed as for PlaceOrder.
	PlaceCheckout(ctx context.Context, req stock.CheckoutRequest) (co stock.Checkout, replayed bool, err error)
	// Checkout reads a checkout; PayCheckout and CancelCheckout move every line of it, as
	// PayOrder and CancelOrder an order.
	Checkout(ctx context.Context, checkoutID string) (stock.Checkout, error)
	WaitCheckout(ctx context.Context, checkoutID string, wait time.Duration) (stock.Checkout, error)
	PayCheckout(ctx context.Context, checkoutID, userID string) (stock.Checkout, error)
	CancelCheckout(ctx context.Context, checkoutID, userID string) (stock.Checkout, error)
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
}

// openAPI is the contract of the HTTP API, served as it is.
//
//go:embed openapi.yaml
var openAPI []byte

// maxBodyBytes is the request body limit of the contract.
const maxBodyBytes = 4 << 10

type handler struct {
	Config
	isAdmin func(c *gin.Context) (bool, error) // whether the request carries the admin token; an error for a wrong one
}

// New returns the service's HTTP handler.
func New(cfg Config) (http.Handler, error) {
	// Release mode: gin's debug mode prints every route at start and warns on every request.
	gin.SetMode(gin.ReleaseMode)
	h := &handler{Config: cfg}
	r := gin.New()
	r.HandleMethodNotAllowed = true
	if err := r.SetTrustedProxies(cfg.TrustedProxies); err != nil {
		return nil, fmt.Errorf("trusted proxies: %w", err)
	}
	r.Use(withRequestID(cfg.Log), newHTTPMetrics(cfg.Registerer).middleware(), withRecovery(), limitBody(maxBodyBytes))
	h.isAdmin = adminCheck(cfg.AdminToken)

	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.GET("/readyz", h.ready)
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})))
	r.GET("/openapi.yaml", func(c *gin.Context) { c.Data(http.StatusOK, "application/yaml", openAPI) })

	v1 := r.Group("/api/v1")
	if cfg.RateLimit.Rate > 0 {
		v1.Use(newClientLimiter(cfg.RateLimit).middleware())
	}
	admin := requireAdmin(h.isAdmin)
	v1.PUT("/products/:sku", admin, h.putProduct)
	v1.GET("/products/:sku", h.getProduct)
	v1.GET("/products/:sku/audit", admin, h.audit)
	v1.POST("/products/:sku/reconcile", admin, h.reconcile)
	v1.GET("/products/:sku/locks", admin, h.locks)
	v1.POST("/products/:sku/orders", h.placeOrder)
	v1.GET("/orders/:order_id", h.getOrder)
	v1.POST("/orders/:order_id/pay", h.payOrder)
	v1.POST("/orders/:order_id/cancel", h.cancelOrder)
	v1.POST("/checkouts", h.placeCheckout)
	v1.GET("/checkouts/:checkout_id", h.getCheckout)
	v1.POST("/checkouts/:checkout_id/pay", h.payCheckout)
	v1.POST("/checkouts/:checkout_id/cancel", h.cancelCheckout)

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
			logger(c).Warn("backend not ready", "backend", check.Name, "err", err)
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
	c.JSON(http.StatusOK, productJSON(p))
}

func (h *handler) getProduct(c *gin.Context) {
	sku, ok := skuParam(c)
	if !ok {
		return
	}
	p, err := h.Sales.Product(c.Request.Context(), sku)
	if err != nil {
		fail(c, err, "product "+sku)
		return
	}
	c.JSON(http.StatusOK, productJSON(p))
}

func (h *handler) audit(c *gin.Context) {
	sku, ok := skuParam(c)
	if !ok {
		return
	}
	a, err := h.Sales.Audit(c.Request.Context(), sku)
	if err != nil {
		fail(c, err, "product "+sku)
		return
	}
	c.JSON(http.StatusOK, auditJSON(a))
}

// reconcile rebuilds the product's Redis admission state from the database.
func (h *handler) reconcile(c *gin.Context) {
	sku, ok := skuParam(c)
	if !ok {
		return
	}
	a, err := h.Sales.Reconcile(c.Request.Context(), sku)
	if err != nil {
		fail(c, err, "product "+sku)
		return
	}
	c.JSON(http.StatusOK, auditJSON(a))
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

func (h *handler) placeOrder(c *gin.Context) {
	sku, ok := skuParam(c)
	if !ok {
		return
	}
	key, ok := idempotencyKey(c)
	if !ok {
		return
	}
	var body orderBody
	if !decode(c, &body) {
		return
	}
	req, err := body.request(sku, key)
	if err == nil {
		req.Strategy, err = h.Sales.Resolve(body.Strategy)
	}
	if err != nil {
		fail(c, err, "")
		return
	}
	order, _, err := h.Sales.PlaceOrder(c.Request.Context(), req)
	if err != nil {
		fail(c, err, "product "+sku)
		return
	}
	if order.Status == stock.Queued {
		// Accepted, not yet written: the buyer follows it at its Location.
		c.Header("Location", "/api/v1/orders/"+order.OrderID)
		c.JSON(http.StatusAccepted, orderJSON(order))
		return
	}
	c.JSON(http.StatusCreated, orderJSON(order))
}

func (h *handler) getOrder(c *gin.Context) {
	id, ok := orderIDParam(c)
	if !ok {
		return
	}
	wait, err := waitParam(c)
	if err != nil {
		fail(c, err, "")
		return
	}
	var o stock.Order
	if wait > 0 {
		o, err = h.Sales.WaitOrder(c.Request.Context(), id, wait)
	} else {
		o, err = h.Sales.Order(c.Request.Context(), id)
	}
	if err != nil {
		fail(c, err, "order "+id)
		return
	}
	c.JSON(http.StatusOK, orderJSON(o))
}

// payOrder is the payment provider's callback: the buyer's pending order is confirmed.
func (h *handler) payOrder(c *gin.Context) {
	id, ok := orderIDParam(c)
	if !ok {
		return
	}
	var body buyerBody
	if !decode(c, &body) {
		return
	}
	user, err := body.user(true)
	if err != nil {
		fail(c, err, "")
		return
	}
	o, err := h.Sales.PayOrder(c.Request.Context(), id, user)
	if err != nil {
		fail(c, err, "order "+id)
		return
	}
	c.JSON(http.StatusOK, orderJSON(o))
}

// cancelOrder cancels the buyer's order, or — with the admin token — any order.
func (h *handler) cancelOrder(c *gin.Context) {
	id, ok := orderIDParam(c)
	if !ok {
		return
	}
	user, ok := h.canceller(c)
	if !ok {
		return
	}
	o, err := h.Sales.CancelOrder(c.Request.Context(), id, user)
	if err != nil {
		fail(c, err, "order "+id)
		return
	}
	c.JSON(http.StatusOK, orderJSON(o))
}

// canceller reads who cancels: the buyer the body names, or the admin (the bearer token, no
// body needed: user ""). On failure it answers, and returns false.
func (h *handler) canceller(c *gin.Context) (string, bool) {
	admin, err := h.isAdmin(c)
	if err != nil {
		fail(c, err, "")
		return "", false
	}
	var body buyerBody
	if !decodeBody(c, &body, admin) {
		return "", false
	}
	user, err := body.user(!admin)
	if err != nil {
		fail(c, err, "")
		return "", false
	}
	return user, true
}

// placeCheckout places several products in one order, every line or none.
func (h *handler) placeCheckout(c *gin.Context) {
	key, ok := idempotencyKey(c)
	if !ok {
		return
	}
	var body checkoutBody
	if !decode(c, &body) {
		return
	}
	req, err := body.request(key)
	if err == nil {
		req.Strategy, err = h.Sales.Resolve(body.Strategy)
	}
	if err != nil {
		fail(c, err, "")
		return
	}
	co, _, err := h.Sales.PlaceCheckout(c.Request.Context(), req)
	if err != nil {
		fail(c, err, "checkout")
		return
	}
	if co.Status == stock.Queued {
		// Accepted, not yet written: the buyer follows it at its Location.
		c.Header("Location", "/api/v1/checkouts/"+co.CheckoutID)
		c.JSON(http.StatusAccepted, checkoutJSON(co))
		return
	}
	c.JSON(http.StatusCreated, checkoutJSON(co))
}

func (h *handler) getCheckout(c *gin.Context) {
	id, ok := checkoutIDParam(c)
	if !ok {
		return
	}
	wait, err := waitParam(c)
	if err != nil {
		fail(c, err, "")
		return
	}
	var co stock.Checkout
	if wait > 0 {
		co, err = h.Sales.WaitCheckout(c.Request.Context(), id, wait)
	} else {
		co, err = h.Sales.Checkout(c.Request.Context(), id)
	}
	if err != nil {
		fail(c, err, "checkout "+id)
		return
	}
	c.JSON(http.StatusOK, checkoutJSON(co))
}

// payCheckout is the payment provider's callback for a checkout: every line confirmed at once.
func (h *handler) payCheckout(c *gin.Context) {
	id, ok := checkoutIDParam(c)
	if !ok {
		return
	}
	var body buyerBody
	if !decode(c, &body) {
		return
	}
	user, err := body.user(true)
	if err != nil {
		fail(c, err, "")
		return
	}
	co, err := h.Sales.PayCheckout(c.Request.Context(), id, user)
	if err != nil {
		fail(c, err, "checkout "+id)
		return
	}
	c.JSON(http.StatusOK, checkoutJSON(co))
}

// cancelCheckout cancels every line of the buyer's checkout, or — with the admin token — of any.
func (h *handler) cancelCheckout(c *gin.Context) {
	id, ok := checkoutIDParam(c)
	if !ok {
		return
	}
	user, ok := h.canceller(c)
	if !ok {
		return
	}
	co, err := h.Sales.CancelCheckout(c.Request.Context(), id, user)
	if err != nil {
		fail(c, err, "checkout "+id)
		return
	}
	c.JSON(http.StatusOK, checkoutJSON(co))
}
