package handler

import (
	"math"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/seckill/internal/frontdoor"
	"github.com/flashsale/seckill/internal/stock"
)

// ctxBuyer keeps the buyer a token named (its sub) in the request's context.
const ctxBuyer = "seckill.buyer"

// passHeader carries a product's pass (a checkout: comma-separated, one per product with a room).
const passHeader = "Seckill-Pass"

// errForbidden is a body that names a buyer other than the token's sub.
var errForbidden = httpError("forbidden")

// buyerDoor is the door of every buyer route. With identity on, the bearer token names the buyer
// (401 unauthenticated otherwise: a request the door cannot judge — no key yet, a key it cannot
// fetch — is refused, never let through, since letting it through would let anyone buy as
// anyone); then the buyer's bucket, shared by every instance, takes one request. With
// orAdmin, the admin token goes through instead (an admin's cancel).
func (h *handler) buyerDoor(orAdmin bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		if h.Door.Buyers == nil {
			c.Next()
			return
		}
		if orAdmin {
			if admin, _ := h.isAdmin(c); admin {
				c.Next()
				return
			}
			c.Writer.Header().Del("WWW-Authenticate") // not the admin: judged as a buyer below
		}
		sub, err := h.Door.Buyers.Buyer(c.Request.Context(), c.GetHeader("Authorization"))
		if err != nil {
			fail(c, err, "")
			return
		}
		if h.Door.Limit != nil {
			if err := h.Door.Limit.Allow(c.Request.Context(), sub); err != nil {
				fail(c, err, "")
				return
			}
		}
		c.Set(ctxBuyer, sub)
		c.Next()
	}
}

// authenticated is the buyer the request's token named, when identity is on.
func authenticated(c *gin.Context) (string, bool) {
	sub := c.GetString(ctxBuyer)
	return sub, sub != ""
}

// owns reports whether the authenticated buyer (if any) holds every line of one: with identity
// on, another buyer's order or checkout is answered as unknown, so ids cannot be probed.
func owns(c *gin.Context, one stock.Checkout) bool {
	sub, ok := authenticated(c)
	if !ok {
		return true
	}
	if one.UserID != "" && one.UserID != sub {
		return false
	}
	for _, l := range one.Lines {
		if l.UserID != "" && l.UserID != sub {
			return false
		}
	}
	return true
}

// room reads what sku's waiting room needs to know of its product: its window, and whether it is
// sold out as far as this instance knows. On failure, or when it has none (404), it answers, and
// returns false.
func (h *handler) room(c *gin.Context, sku string) (frontdoor.Product, bool) {
	p, err := h.Sales.Product(c.Request.Context(), sku)
	switch {
	case err != nil:
		fail(c, err, "product "+sku)
		return frontdoor.Product{}, false
	case p.WaitingRoom == nil:
		fail(c, stock.ErrNotFound, "the waiting room of product "+sku)
		return frontdoor.Product{}, false
	case h.Door.Room == nil:
		fail(c, stock.ErrUnavailable, "")
		return frontdoor.Product{}, false
	}
	return frontdoor.Product{SKU: p.SKU, Room: frontdoor.Config{AdmitPerS: p.WaitingRoom.AdmitPerS, PassTTL: p.WaitingRoom.PassTTL},
		StartsAt: p.Window.Starts, EndsAt: p.Window.Ends, SoldOut: p.Stock <= 0}, true
}

// join puts the buyer in the product's line: 202 with its ticket and Location, the same ticket
// however often it joins.
func (h *handler) join(c *gin.Context) {
	sku, ok := skuParam(c)
	if !ok {
		return
	}
	id, ok := buyer(c, false)
	if !ok {
		return
	}
	p, ok := h.room(c, sku)
	if !ok {
		return
	}
	w, err := h.Door.Room.Join(c.Request.Context(), p, id)
	if err != nil {
		fail(c, err, "product "+sku)
		return
	}
	// A join says where the ticket stands; the pass comes with a poll, even to a buyer let in at
	// once (an idle line): one way to receive a pass.
	w.Admitted = false
	c.Header("Location", "/api/v1/products/"+sku+"/queue/"+w.Ticket)
	c.JSON(http.StatusAccepted, waitJSON(w))
}

// poll answers where the buyer's ticket stands: waiting, or admitted with its pass. Without
// identity the buyer is ?user_id= (a GET has no body).
func (h *handler) poll(c *gin.Context) {
	sku, ok := skuParam(c)
	if !ok {
		return
	}
	var named *string
	if u, given := c.GetQuery("user_id"); given {
		named = &u
	}
	id, err := claim(c, named)
	if err != nil {
		fail(c, err, "")
		return
	}
	p, ok := h.room(c, sku)
	if !ok {
		return
	}
	w, err := h.Door.Room.Poll(c.Request.Context(), p, id, c.Param("ticket"))
	if err != nil {
		fail(c, err, "ticket of product "+sku)
		return
	}
	c.JSON(http.StatusOK, waitJSON(w))
}

// waitJSON is a ticket's answer: admitted with its pass, or waiting with its position (null
// before the doors open, with opens_at), ETA and when to poll again.
func waitJSON(w frontdoor.Wait) gin.H {
	if w.Admitted {
		return gin.H{"ticket": w.Ticket, "admitted": true, "pass": w.Pass, "pass_expires_at": w.PassExpiresAt.UTC()}
	}
	out := gin.H{"ticket": w.Ticket, "admitted": false, "position": w.Position,
		"eta_s": int64(math.Ceil(w.ETA.Seconds())), "poll_after_ms": w.PollAfter.Milliseconds()}
	if !w.OpensAt.IsZero() {
		out["opens_at"] = w.OpensAt.UTC()
	}
	return out
}

// retryAfter is Retry-After for a wait of d: whole seconds rounded up, at least 1.
func retryAfter(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }
