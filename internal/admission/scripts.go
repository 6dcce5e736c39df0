package admission

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/admit.lua
	admitLua string
	//go:embed lua/giveback.lua
	giveBackLua string
	//go:embed lua/settle.lua
	settleLua string
	//go:embed lua/orphans.lua
	orphansLua string
	//go:embed lua/sweep.lua
	sweepLua string
	//go:embed lua/state.lua
	stateLua string
	//go:embed lua/restock.lua
	restockLua string
	//go:embed lua/warm.lua
	warmLua string
	//go:embed lua/beat.lua
	beatLua string
	//go:embed lua/live.lua
	liveLua string
	//go:embed lua/handover.lua
	handOverLua string

	admitScript    = redis.NewScript(admitLua)
	giveBackScript = redis.NewScript(giveBackLua)
	settleScript   = redis.NewScript(settleLua)
	orphansScript  = redis.NewScript(orphansLua)
	sweepScript    = redis.NewScript(sweepLua)
	stateScript    = redis.NewScript(stateLua)
	restockScript  = redis.NewScript(restockLua)
	warmScript     = redis.NewScript(warmLua)
	beatScript     = redis.NewScript(beatLua)
	liveScript     = redis.NewScript(liveLua)
	handOverScript = redis.NewScript(handOverLua)
)

// Keys are the Redis keys of one product's admission (lua/admit.lua). They share the {sku} hash
// tag, so that they sit in one Redis Cluster slot, which a script over several keys requires.
type Keys struct {
	Stock    string // the admission counter: the database's stock, minus the reservations
	Buyers   string // the users admitted in this sale round
	Reserved string // the reservations of orders in their sections: user -> reservation id, units, instance, Idempotency-Key
	Queued   string // the same, of reservations handed over to the order queue
}

// KeysOf returns sku's admission keys, for the service to publish (GET .../locks).
func KeysOf(sku string) Keys {
	p := prefix(sku)
	return Keys{Stock: p + "stock", Buyers: p + "buyers", Reserved: p + "reserved", Queued: p + "queued"}
}

// prefix starts every key of sku's admission.
func prefix(sku string) string { return "seckill:{" + sku + "}:" }

// all is k in the order of admit.lua's KEYS, which the scripts over all four share.
func (k Keys) all() []string { return []string{k.Stock, k.Buyers, k.Reserved, k.Queued} }

// sweptKey is the sweeper's marker of a reservation it returned (lua/sweep.lua).
func sweptKey(sku, reservation string) string { return prefix(sku) + "swept:" + reservation }

// returnedKey is restock's marker of an ended order whose units it returned (lua/restock.lua).
func returnedKey(sku, order string) string { return prefix(sku) + "returned:" + order }

// withSwept is sku's keys (all) followed by the sweeper's marker of each reservation.
func withSwept(sku string, reservations []string) []string {
	ks := KeysOf(sku).all()
	for _, id := range reservations {
		ks = append(ks, sweptKey(sku, id))
	}
	return ks
}
