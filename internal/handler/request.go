package handler

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	segjson "github.com/segmentio/encoding/json"

	"github.com/flashsale/seckill/contract"
	"github.com/flashsale/seckill/internal/frontdoor"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// Limits of the HTTP contract (openapi.yaml), and bounds that keep absurd numbers out of the database.
const (
	maxUserIDBytes         = 64
	maxIdempotencyKeyBytes = 128
	maxNameBytes           = 128
	maxStock               = 1_000_000_000
	maxPerOrderLimit       = 1_000_000
	maxPaymentTimeoutS     = 86400 // a day
)

var orderIDPattern = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{26}$`) // a ULID

// validSKU reports whether sku matches [A-Za-z0-9._-]{1,64}.
func validSKU(sku string) bool { return plainName(sku, "._-") }

// plainName reports whether s is 1 to 64 ASCII letters, digits and punct: a loop, not a regexp,
// since every order asks.
func plainName(s, punct string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte(punct, b) >= 0) {
			return false
		}
	}
	return true
}

// skuParam validates the {sku} path segment, answering 400 when it is malformed.
func skuParam(c *gin.Context) (string, bool) {
	sku := c.Param("sku")
	if !validSKU(sku) {
		invalid(c, "sku must match [A-Za-z0-9._-]{1,64}")
		return "", false
	}
	return sku, true
}

// idempotencyKey reads the optional Idempotency-Key header.
func idempotencyKey(c *gin.Context) (string, bool) {
	key := c.GetHeader("Idempotency-Key")
	if len(key) > maxIdempotencyKeyBytes || !plainText(key) {
		invalid(c, "Idempotency-Key must be at most %d bytes of printable text", maxIdempotencyKeyBytes)
		return "", false
	}
	return key, true
}

// decode reads exactly one JSON object into dst, refusing unknown fields, trailing data and
// bodies over the limit; on failure it answers 400 and returns false.
func decode(c *gin.Context, dst any) bool { return decodeBody(c, dst, false) }

// bodies are the buffers request bodies are read into: one read, no growing, on every order.
var bodies = sync.Pool{New: func() any { return bytes.NewBuffer(make([]byte, 0, maxBodyBytes+bytes.MinRead)) }}

// decodeBody is decode, but an empty body is no object at all when allowEmpty (dst untouched).
func decodeBody(c *gin.Context, dst any, allowEmpty bool) bool {
	buf := bodies.Get().(*bytes.Buffer)
	defer func() {
		buf.Reset()
		bodies.Put(buf)
	}()
	_, err := buf.ReadFrom(c.Request.Body)
	if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
		invalid(c, "request body exceeds %d bytes", maxBodyBytes)
		return false
	}
	if err != nil {
		invalid(c, "request body could not be read")
		return false
	}
	raw := buf.Bytes()
	if allowEmpty && len(bytes.TrimSpace(raw)) == 0 {
		return true
	}
	// encoding/json would quietly replace invalid UTF-8 with U+FFFD, merging distinct user ids
	// into one; RFC 8259 makes such a body malformed, so refuse it.
	if !utf8.Valid(raw) {
		invalid(c, "request body is not valid UTF-8")
		return false
	}
	if parsed(raw, dst) {
		return true
	}
	err = decodeStrict(raw, dst)
	wrongType, isType := errors.AsType[*json.UnmarshalTypeError](err)
	syntax, isSyntax := errors.AsType[*json.SyntaxError](err)
	switch {
	case err == nil:
		return true
	case errors.Is(err, io.EOF):
		invalid(c, "request body is empty; a JSON object is required")
	case isType && wrongType.Field != "":
		invalid(c, "field %s must be a JSON %s", wrongType.Field, jsonKind(wrongType.Type.Kind()))
	case isType:
		invalid(c, "request body must be a JSON object")
	case isSyntax:
		invalid(c, "malformed JSON at byte %d", syntax.Offset)
	default:
		// json's own messages for unknown fields and truncated input name only the field.
		invalid(c, "malformed JSON body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return false
}

// parsed decodes raw into dst on the hot path, where nearly every body is a well-formed object:
// segmentio/encoding's json.Parse keeps encoding/json's rules (names matched without case, the
// last duplicate wins, unknown fields refused) without its reflection per field or its copy of
// the body. A body it refuses is left to decodeStrict, whose errors the answers are worded from;
// FuzzDecodersAgree holds the two to the same results.
func parsed(raw []byte, dst any) bool {
	flags := segjson.DisallowUnknownFields
	if planted.On(planted.LooseFastDecode) {
		flags = 0
	}
	rest, err := segjson.Parse(raw, dst, flags)
	return err == nil && len(rest) == 0
}

// decodeStrict decodes exactly one JSON object of raw into dst with encoding/json, refusing
// unknown fields and trailing data.
func decodeStrict(raw []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil && len(bytes.TrimSpace(raw[dec.InputOffset():])) > 0 {
		err = errors.New("trailing data after the JSON object")
	}
	return err
}

// jsonKind names the JSON type a Go kind is decoded from.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Struct, reflect.Map:
		return "object"
	default:
		return "integer within range"
	}
}

// valueOr is *p, or def when p is nil: an optional field of a body.
func valueOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// plainText reports whether s is valid UTF-8 without control characters.
func plainText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// A placeBody is the JSON body of a POST that places an order or a checkout.
type placeBody interface {
	// request validates the body into a request for the buyer (claim), its strategy resolved by
	// sales, or returns errForbidden or a *stock.InvalidError.
	request(c *gin.Context, key string, sales Sales) (stock.CheckoutRequest, error)
}

type orderBody struct {
	sku      string  // from the path
	UserID   *string `json:"user_id"`
	Quantity *int    `json:"quantity"`
	Strategy string  `json:"strategy"`
}

// request validates the body into an order: a request of one line. Quantity defaults to 1.
func (b orderBody) request(c *gin.Context, key string, sales Sales) (stock.CheckoutRequest, error) {
	user, err := claim(c, b.UserID)
	if err != nil {
		return stock.CheckoutRequest{}, err
	}
	req := stock.OrderRequest{SKU: b.sku, UserID: user, IdempotencyKey: key, Quantity: valueOr(b.Quantity, 1)}
	if req.Quantity < 1 || req.Quantity > maxPerOrderLimit {
		return stock.CheckoutRequest{}, &stock.InvalidError{Msg: "quantity must be at least 1 and at most the product's max_per_order"}
	}
	req.Strategy, err = sales.Resolve(b.Strategy)
	return stock.OrderOf(req), err
}

// claim is who a request is for: the token's sub, with identity on — a body's user_id must then
// be absent or the same (errForbidden) — or else the body's user_id, trusted. Either must be
// present, short and printable (a *stock.InvalidError).
func claim(c *gin.Context, userID *string) (string, error) {
	id := ""
	sub, authed := authenticated(c)
	switch {
	case authed && userID != nil && *userID != sub:
		return "", errForbidden
	case authed:
		id = sub
	case userID != nil:
		id = *userID
	}
	switch {
	case id == "":
		return "", &stock.InvalidError{Msg: "user_id is required"}
	case len(id) > maxUserIDBytes:
		return "", &stock.InvalidError{Msg: "user_id must be at most 64 bytes"}
	case !plainText(id):
		return "", &stock.InvalidError{Msg: "user_id must be valid UTF-8 without control characters"}
	}
	return id, nil
}

// buyer reads who a payment, a cancellation or a join is for (claim). The admin (the bearer
// token on a cancellation) needs no body: user "". On failure it answers, and returns false.
func buyer(c *gin.Context, admin bool) (string, bool) {
	var body struct {
		UserID *string `json:"user_id"`
	}
	_, authed := authenticated(c)
	if !decodeBody(c, &body, admin || authed) {
		return "", false
	}
	if admin {
		return "", true
	}
	user, err := claim(c, body.UserID)
	if err != nil {
		fail(c, err, "")
		return "", false
	}
	return user, true
}

type productBody struct {
	Name            *string    `json:"name"`
	Stock           *int64     `json:"stock"`
	MaxPerOrder     *int       `json:"max_per_order"`
	StartsAt        *time.Time `json:"starts_at"`
	EndsAt          *time.Time `json:"ends_at"`
	PaymentTimeoutS *int       `json:"payment_timeout_s"`
	WaitingRoom     *roomBody  `json:"waiting_room"`
}

// roomBody is a product's waiting room as PUT takes it and GET shows it.
type roomBody struct {
	AdmitPerS *int `json:"admit_per_s"`
	PassTTLS  *int `json:"pass_ttl_s,omitempty"`
}

// room validates the body into a waiting room: admit_per_s required, pass_ttl_s defaulting to
// 120, both within the contract's bounds (frontdoor.Config.Validate), or a *stock.InvalidError.
func (b roomBody) room() (*stock.WaitingRoom, error) {
	if b.AdmitPerS == nil {
		return nil, &stock.InvalidError{Msg: "waiting_room.admit_per_s is required"}
	}
	cfg := frontdoor.Config{AdmitPerS: *b.AdmitPerS}
	if b.PassTTLS != nil {
		if *b.PassTTLS <= 0 {
			return nil, &stock.InvalidError{Msg: "waiting_room.pass_ttl_s must be 10 to 3600 seconds"}
		}
		cfg.PassTTL = time.Duration(*b.PassTTLS) * time.Second
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	return &stock.WaitingRoom{AdmitPerS: cfg.AdmitPerS, PassTTL: cfg.PassTTL}, nil
}

// roomJSON is room for an answer: absent when the product has none.
func roomJSON(room *stock.WaitingRoom) *roomBody {
	if room == nil {
		return nil
	}
	rate, ttl := room.AdmitPerS, int(room.PassTTL/time.Second)
	return &roomBody{AdmitPerS: &rate, PassTTLS: &ttl}
}

// spec validates the body into a product spec. max_per_order defaults to 1, payment_timeout_s
// to 0 (orders confirmed at once), the window to none.
func (b productBody) spec(sku string) (stock.ProductSpec, error) {
	spec := stock.ProductSpec{SKU: sku}
	switch {
	case b.Name == nil || *b.Name == "":
		return spec, &stock.InvalidError{Msg: "name is required"}
	case len(*b.Name) > maxNameBytes || !plainText(*b.Name):
		return spec, &stock.InvalidError{Msg: "name must be at most 128 bytes of printable text"}
	case b.Stock == nil:
		return spec, &stock.InvalidError{Msg: "stock is required"}
	case *b.Stock < 0 || *b.Stock > maxStock:
		return spec, &stock.InvalidError{Msg: "stock must be between 0 and 1000000000"}
	case b.StartsAt != nil && b.EndsAt != nil && !b.EndsAt.After(*b.StartsAt):
		return spec, &stock.InvalidError{Msg: "ends_at must be after starts_at"}
	case b.PaymentTimeoutS != nil && (*b.PaymentTimeoutS < 0 || *b.PaymentTimeoutS > maxPaymentTimeoutS):
		return spec, &stock.InvalidError{Msg: "payment_timeout_s must be between 0 and 86400"}
	}
	spec.Name, spec.Stock, spec.MaxPerOrder = *b.Name, *b.Stock, valueOr(b.MaxPerOrder, 1)
	if spec.MaxPerOrder < 1 || spec.MaxPerOrder > maxPerOrderLimit {
		return spec, &stock.InvalidError{Msg: "max_per_order must be between 1 and 1000000"}
	}
	spec.Window = stock.Window{Starts: valueOr(b.StartsAt, time.Time{}).UTC(), Ends: valueOr(b.EndsAt, time.Time{}).UTC()}
	spec.PaymentTimeout = time.Duration(valueOr(b.PaymentTimeoutS, 0)) * time.Second
	if b.WaitingRoom != nil {
		room, err := b.WaitingRoom.room()
		if err != nil {
			return spec, err
		}
		spec.WaitingRoom = room
	}
	return spec, nil
}

type productResponse struct {
	SKU             string     `json:"sku"`
	Name            string     `json:"name"`
	InitialStock    int64      `json:"initial_stock"`
	Stock           int64      `json:"stock"`
	Sold            int64      `json:"sold"`
	Version         int64      `json:"version"`
	MaxPerOrder     int        `json:"max_per_order"`
	StartsAt        *time.Time `json:"starts_at,omitempty"`
	EndsAt          *time.Time `json:"ends_at,omitempty"`
	PaymentTimeoutS int        `json:"payment_timeout_s"`
	WaitingRoom     *roomBody  `json:"waiting_room,omitempty"`
}

func productJSON(p stock.Product) productResponse {
	return productResponse{SKU: p.SKU, Name: p.Name, InitialStock: p.InitialStock, Stock: p.Stock, Sold: p.Sold(),
		Version: p.Version, MaxPerOrder: p.MaxPerOrder, StartsAt: optionalTime(p.Window.Starts), EndsAt: optionalTime(p.Window.Ends),
		PaymentTimeoutS: int(p.PaymentTimeout / time.Second), WaitingRoom: roomJSON(p.WaitingRoom)}
}

// optionalTime is t for JSON: absent when zero.
func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// orderReply is an order's id, status and body as the contract writes it: its checkout's one line.
func orderReply(co stock.Checkout) (string, stock.Status, any) {
	o := co.Lines[0]
	return o.OrderID, o.Status, contract.Order{OrderID: o.OrderID, SKU: o.SKU, UserID: o.UserID, Quantity: o.Quantity, Strategy: o.Strategy,
		Status: string(o.Status), Reason: o.Reason, ExpiresAt: optionalTime(o.ExpiresAt), CreatedAt: o.CreatedAt, CheckoutID: o.CheckoutID}
}

type checkoutBody struct {
	UserID   *string            `json:"user_id"`
	Lines    []checkoutLineBody `json:"lines"`
	Strategy string             `json:"strategy"`
}

type checkoutLineBody struct {
	SKU      *string `json:"sku"`
	Quantity *int    `json:"quantity"`
}

// request validates the body into a checkout request: each line a well-formed SKU, its quantity
// defaulting to 1. How many lines, and distinct, the service checks (stock.CheckoutRequest.Validate).
func (b checkoutBody) request(c *gin.Context, key string, sales Sales) (stock.CheckoutRequest, error) {
	user, err := claim(c, b.UserID)
	if err != nil {
		return stock.CheckoutRequest{}, err
	}
	req := stock.CheckoutRequest{UserID: user, IdempotencyKey: key}
	for i, l := range b.Lines {
		if l.SKU == nil || !validSKU(*l.SKU) {
			return req, &stock.InvalidError{Msg: fmt.Sprintf("lines[%d].sku must match [A-Za-z0-9._-]{1,64}", i)}
		}
		line := stock.OrderRequest{SKU: *l.SKU, Quantity: valueOr(l.Quantity, 1)}
		if line.Quantity < 1 || line.Quantity > maxPerOrderLimit {
			return req, &stock.InvalidError{Msg: fmt.Sprintf("lines[%d].quantity must be at least 1 and at most the product's max_per_order", i)}
		}
		req.Lines = append(req.Lines, line)
	}
	req.Strategy, err = sales.Resolve(b.Strategy)
	return req, err
}

// checkoutReply is a checkout's id, status and body as the contract writes it.
func checkoutReply(co stock.Checkout) (string, stock.Status, any) {
	out := contract.Checkout{CheckoutID: co.CheckoutID, UserID: co.UserID, Strategy: co.Strategy, Status: string(co.Status),
		Reason: co.Reason, ExpiresAt: optionalTime(co.ExpiresAt), CreatedAt: co.CreatedAt, Lines: []contract.CheckoutLine{}}
	for _, l := range co.Lines {
		out.Lines = append(out.Lines, contract.CheckoutLine{OrderID: l.OrderID, SKU: l.SKU, Quantity: l.Quantity})
	}
	return co.CheckoutID, co.Status, out
}

// maxWait bounds ?wait= on reading an order or a checkout: a held request holds a connection.
const maxWait = 30 * time.Second

// waitParam reads ?wait= (a Go duration, "5s"), capped at maxWait; absent, 0. A malformed or
// negative one is an *stock.InvalidError.
func waitParam(c *gin.Context) (time.Duration, error) {
	raw, ok := c.GetQuery("wait")
	if !ok {
		return 0, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		return 0, &stock.InvalidError{Msg: fmt.Sprintf("wait %q: want a duration such as 5s, at most %s", raw, maxWait)}
	}
	return min(d, maxWait), nil
}

func auditJSON(a service.Audit) contract.Audit {
	out := contract.Audit{SKU: a.SKU, InitialStock: a.InitialStock, Stock: a.Stock, OrderedQuantity: a.OrderedQuantity,
		Orders: a.Orders, DistinctBuyers: a.DistinctBuyers, Oversold: a.Oversold(), Consistent: a.Consistent(),
		Pending: a.Pending, Cancelled: a.Cancelled, Expired: a.Expired, Queued: a.Queued}
	if r := a.Redis; r != nil {
		held := a.HeldBack()
		out.RedisStock, out.RedisReservations, out.RedisReserved, out.HeldBack = r.Stock, &r.Reservations, &r.Reserved, &held
	}
	return out
}

func locksJSON(sku string, l service.Locks) contract.Locks {
	out := contract.Locks{SKU: sku, Locks: []contract.Lock{}, Admission: contract.AdmissionKeys{
		Stock: l.Admission.Stock, Buyers: l.Admission.Buyers, Reserved: l.Admission.Reserved, Queued: l.Admission.Queued}}
	for _, k := range l.Locks {
		out.Locks = append(out.Locks, contract.Lock{Strategy: k.Strategy, Backend: k.Backend, Key: k.Key})
	}
	return out
}
