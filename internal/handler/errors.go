package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/seckill/internal/feed"
	"github.com/flashsale/seckill/internal/frontdoor"
	"github.com/flashsale/seckill/internal/stock"
)

// httpError is an error of the HTTP layer itself, named by its code (stock.Code keeps it).
type httpError string

func (e httpError) Error() string { return string(e) }

// Code implements the interface stock.Code asks an error for.
func (e httpError) Code() string { return string(e) }

// The handler's own errors.
var (
	errUnauthenticated  = httpError("unauthenticated")    // the admin token was missing or wrong
	errRateLimited      = httpError("rate_limited")       // one client is over its token bucket
	errMethodNotAllowed = httpError("method_not_allowed") // a known route, another method
	errPanic            = errors.New("panic")             // a handler panicked; answered as 500 internal
)

// answers is the one place where error codes become HTTP statuses and messages (the error table of
// docs/lifecycle.md): the code comes from stock.Code, which also labels the order metrics, so an
// answer, its metric and its log line always say the same thing.
var answers = map[string]struct {
	status  int
	message func(subject string, err error) string
}{
	"invalid_argument": {http.StatusBadRequest, func(string, error) string { return "invalid request" }},
	"unauthenticated": {http.StatusUnauthorized, func(_ string, err error) string {
		if errors.Is(err, frontdoor.ErrUnauthenticated) {
			return "a valid Authorization: Bearer <buyer token> header is required"
		}
		return "a valid Authorization: Bearer <admin token> header is required"
	}},
	"forbidden": {http.StatusForbidden, func(string, error) string {
		return "user_id must be the buyer the token names, or left out"
	}},
	"pass_required": {http.StatusForbidden, func(s string, _ error) string {
		return "a pass for " + s + " is required in the Seckill-Pass header: join its waiting room"
	}},
	"pass_invalid": {http.StatusForbidden, func(s string, _ error) string {
		return "the pass is not valid for this buyer and " + s + " (forged, expired, or another's)"
	}},
	"not_found":          {http.StatusNotFound, func(s string, _ error) string { return s + " not found" }},
	"method_not_allowed": {http.StatusMethodNotAllowed, func(s string, _ error) string { return s + " is not allowed" }},
	"sold_out":           {http.StatusConflict, func(s string, _ error) string { return s + " is sold out" }},
	"already_purchased": {http.StatusConflict, func(s string, _ error) string {
		return "this user already holds an order for " + s
	}},
	"idempotency_conflict": {http.StatusConflict, func(string, error) string {
		return "this Idempotency-Key was already used with a different request"
	}},
	"sale_not_started": {http.StatusConflict, func(s string, err error) string {
		if ns, ok := errors.AsType[*stock.SaleNotStartedError](err); ok {
			return s + " goes on sale at " + ns.Starts.Format(time.RFC3339)
		}
		return s + " is not on sale yet"
	}},
	"sale_ended":      {http.StatusConflict, func(s string, _ error) string { return "the sale of " + s + " has ended" }},
	"order_expired":   {http.StatusConflict, func(s string, _ error) string { return s + " expired unpaid; its units are back on sale" }},
	"order_cancelled": {http.StatusConflict, func(s string, _ error) string { return s + " was cancelled" }},
	"busy": {http.StatusTooManyRequests, func(s string, err error) string {
		if errors.Is(err, stock.ErrDuplicateRequest) {
			// The key's first request has not settled: this one can be answered once it has.
			return "a request with this Idempotency-Key is in flight; retry shortly"
		}
		return s + " is busy; retry shortly"
	}},
	"rate_limited": {http.StatusTooManyRequests, func(_ string, err error) string {
		if errors.Is(err, frontdoor.ErrRateLimited) {
			return "too many requests from this buyer; retry after Retry-After"
		}
		return "too many requests from this client; retry shortly"
	}},
	"unavailable": {http.StatusServiceUnavailable, func(_ string, err error) string {
		if errors.Is(err, feed.ErrFull) || errors.Is(err, feed.ErrClosed) {
			return "this instance takes no more event streams now; retry shortly"
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return "a backend did not answer in time; retry shortly"
		}
		return "a backend is unavailable; retry shortly"
	}},
	// The client went away before its answer was ready: not a server fault, so neither a 5xx nor
	// an error log. 499 is the status proxies use for it; nobody is left to read the body.
	"canceled": {499, func(string, error) string { return "the client closed the request" }},
}

// retryAfterSeconds is the Retry-After sent with 429 and 503.
const retryAfterSeconds = "1"

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// SKUs names the lines of a checkout the error is about.
	SKUs []string `json:"skus,omitempty"`
}

// fail answers err with its status and code. subject names what the request was about
// ("product iphone-17"). Only 5xx are logged (withRequestID logs the errors fail records): they
// are ours to fix; 4xx are the client's.
func fail(c *gin.Context, err error, subject string) {
	code := stock.Code(err)
	var skus []string
	if lines, ok := errors.AsType[*stock.CheckoutError](err); ok {
		subject, skus = "product "+strings.Join(lines.SKUs, ", "), lines.SKUs
	}
	status, message := http.StatusInternalServerError, ""
	if a, ok := answers[code]; ok {
		status, message = a.status, a.message(subject, err)
	} else {
		code, message = "internal", "internal error (request id "+requestID(c)+")"
	}
	if invalid, ok := errors.AsType[*stock.InvalidError](err); ok {
		message = invalid.Msg
	}
	if status >= 500 {
		_ = c.Error(err)
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		c.Header("Retry-After", retryAfterSeconds)
	}
	if code == "unauthenticated" && c.Writer.Header().Get("WWW-Authenticate") == "" {
		c.Header("WWW-Authenticate", "Bearer")
	}
	if limited, ok := errors.AsType[*frontdoor.RateLimitedError](err); ok {
		c.Header("Retry-After", strconv.Itoa(retryAfter(limited.RetryAfter)))
	}
	if notStarted, ok := errors.AsType[*stock.SaleNotStartedError](err); ok {
		// Seconds until the start, rounded up: a client that waits that long is not early.
		c.Header("Retry-After", strconv.Itoa(retryAfter(time.Until(notStarted.Starts))))
	}
	c.AbortWithStatusJSON(status, errorBody{Error: errorDetail{Code: code, Message: message, SKUs: skus}})
}

// invalid answers 400 invalid_argument with message.
func invalid(c *gin.Context, format string, args ...any) {
	fail(c, &stock.InvalidError{Msg: fmt.Sprintf(format, args...)}, "")
}

// soldOutAnswers are the 409 sold_out answers to orders, one body per product, made once by
// fail's table: after a sale's last unit nearly every request is answered one of them, and
// encoding it anew each time would cost more than the rest of the answer.
type soldOutAnswers struct {
	mu     sync.RWMutex
	bodies map[string][]byte // by SKU
}

// maxSoldOutAnswers bounds the bodies kept; past it they are dropped and made again as asked.
const maxSoldOutAnswers = 10_000

// jsonContentType is the Content-Type of gin's JSON answers, which fail gives.
var jsonContentType = []string{"application/json; charset=utf-8"}

// answer answers an order for sku, sold out, as fail would.
func (a *soldOutAnswers) answer(c *gin.Context, sku string) {
	a.mu.RLock()
	body, ok := a.bodies[sku]
	a.mu.RUnlock()
	if !ok {
		subject := "product " + sku
		body, _ = json.Marshal(errorBody{Error: errorDetail{Code: "sold_out", Message: answers["sold_out"].message(subject, stock.ErrSoldOut)}})
		a.mu.Lock()
		if len(a.bodies) >= maxSoldOutAnswers {
			clear(a.bodies)
		}
		a.bodies[sku] = body
		a.mu.Unlock()
	}
	c.Abort()
	c.Writer.Header()["Content-Type"] = jsonContentType
	c.Writer.WriteHeader(http.StatusConflict)
	_, _ = c.Writer.Write(body)
}
