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

// keys returns the admission keys of sku: the counter, the buyers and the reservations (see
// lua/admit.lua). The {sku} hash tag puts all of a product's keys in one Redis Cluster slot,
// which a multi-key script requires.
func keys(sku string) []string {
	p := "seckill:{" + sku + "}:"
	return []string{p + "stock", p + "buyers", p + "reserved", p + "queued"}
}

// Keys are the Redis keys of one product's admission (lua/admit.lua).
type Keys struct {
	Stock    string // the admission counter: the database's stock, minus the reservations
	Buyers   string // the users admitted in this sale round
	Reserved string // the reservations of orders in their sections: user -> reservation id, units, instance, Idempotency-Key
	Queued   string // the same, of reservations handed over to the order queue
}

// KeysOf returns sku's admission keys, for the service to publish (GET .../locks).
func KeysOf(sku string) Keys {
	ks := keys(sku)
	return Keys{Stock: ks[0], Buyers: ks[1], Reserved: ks[2], Queued: ks[3]}
}

// sweptKey is the sweeper's marker of a reservation it returned (lua/sweep.lua).
func sweptKey(sku, reservation string) string { return "seckill:{" + sku + "}:swept:" + reservation }

// withSwept is keys(sku) followed by the sweeper's marker of each reservation.
func withSwept(sku string, reservations []string) []string {
	ks := keys(sku)
	for _, id := range reservations {
		ks = append(ks, sweptKey(sku, id))
	}
	return ks
}
