package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/seckill/internal/stock"
)

// The handler's own errors.
var (
	errUnauthenticated = errors.New("unauthenticated") // the admin token was missing or wrong
	errPanic           = errors.New("panic")           // a handler panicked; answered as 500
)

// errorTable is the one place where errors become HTTP statuses and codes (API.md). The first
// entry that matches with errors.Is wins; anything unmatched is a 500 "internal".
var errorTable = []struct {
	err     error
	status  int
	code    string
	message func(subject string) string
}{
	{stock.ErrInvalid, http.StatusBadRequest, "invalid_argument", func(string) string { return "invalid request" }},
	{errUnauthenticated, http.StatusUnauthorized, "unauthenticated", func(string) string {
		return "a valid Authorization: Bearer <admin token> header is required"
	}},
	{stock.ErrNotFound, http.StatusNotFound, "not_found", func(s string) string { return s + " not found" }},
	{stock.ErrSoldOut, http.StatusConflict, "sold_out", func(s string) string { return s + " is sold out" }},
	{stock.ErrAlreadyPurchased, http.StatusConflict, "already_purchased", func(s string) string {
		return "this user already holds an order for " + s
	}},
	{stock.ErrIdempotencyConflict, http.StatusConflict, "idempotency_conflict", func(string) string {
		return "this Idempotency-Key was already used with a different request"
	}},
	{stock.ErrBusy, http.StatusTooManyRequests, "busy", func(s string) string { return s + " is busy; retry shortly" }},
	// Another request with the same Idempotency-Key is being placed right now and has not
	// settled: this one can be answered once it has.
	{stock.ErrDuplicateRequest, http.StatusTooManyRequests, "busy", func(string) string {
		return "a request with this Idempotency-Key is in flight; retry shortly"
	}},
	{errRateLimited, http.StatusTooManyRequests, "rate_limited", func(string) string {
		return "too many requests from this client; retry shortly"
	}},
	{stock.ErrUnavailable, http.StatusServiceUnavailable, "unavailable", func(string) string {
		return "a backend is unavailable; retry shortly"
	}},
	// The client went away before its answer was ready: not a server fault, so neither a 5xx nor
	// an error log. 499 is the status proxies use for it; nobody is left to read the body.
	{context.Canceled, statusClientClosedRequest, "canceled", func(string) string { return "the client closed the request" }},
	// A request that ran out of time waiting on a backend: the backend is too slow to serve it.
	{context.DeadlineExceeded, http.StatusServiceUnavailable, "unavailable", func(string) string {
		return "a backend did not answer in time; retry shortly"
	}},
}

// statusClientClosedRequest is nginx's status for a request its client abandoned.
const statusClientClosedRequest = 499

// retryAfterSeconds is the Retry-After sent with 429 and 503.
const retryAfterSeconds = "1"

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// fail answers err with its status and code. subject names what the request was about
// ("product iphone-17"). Only 5xx are logged: they are ours to fix; 4xx are the client's.
func fail(c *gin.Context, err error, subject string) {
	status, code, message := http.StatusInternalServerError, "internal", ""
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			status, code, message = e.status, e.code, e.message(subject)
			break
		}
	}
	var invalid *stock.InvalidError
	if errors.As(err, &invalid) {
		message = invalid.Msg
	}
	if status == http.StatusInternalServerError {
		message = fmt.Sprintf("internal error (request id %s)", requestID(c))
	}
	if status >= 500 {
		logger(c).LogAttrs(c.Request.Context(), slog.LevelError, "request failed",
			slog.Int("status", status), slog.String("code", code), slog.Any("err", err))
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		c.Header("Retry-After", retryAfterSeconds)
	}
	c.AbortWithStatusJSON(status, errorBody{Error: errorDetail{Code: code, Message: message}})
}

// invalid answers 400 invalid_argument with message.
func invalid(c *gin.Context, format string, args ...any) {
	fail(c, &stock.InvalidError{Msg: fmt.Sprintf(format, args...)}, "")
}
