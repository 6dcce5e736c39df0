package admission

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var lua embed.FS

// script is lua/name.lua, embedded: a missing file fails at start, in every test.
func script(name string) *redis.Script {
	src, err := lua.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return redis.NewScript(string(src))
}

var (
	admitScript    = script("admit")
	giveBackScript = script("giveback")
	settleScript   = script("settle")
	orphansScript  = script("orphans")
	sweepScript    = script("sweep")
	stateScript    = script("state")
	restockScript  = script("restock")
	warmScript     = script("warm")
	beatScript     = script("beat")
	liveScript     = script("live")
	handOverScript = script("handover")
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

// argsOf is a script's ARGV: head, then each of tail.
func argsOf(tail []string, head ...any) []any {
	args := append(make([]any, 0, len(head)+len(tail)), head...)
	for _, s := range tail {
		args = append(args, s)
	}
	return args
}

// withSwept is sku's keys (all) followed by the sweeper's marker of each reservation.
func withSwept(sku string, reservations []string) []string {
	ks := KeysOf(sku).all()
	for _, id := range reservations {
		ks = append(ks, sweptKey(sku, id))
	}
	return ks
}
