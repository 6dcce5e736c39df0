-- Redis fast admission: one atomic step that rejects sold-out and repeat buyers at memory speed,
-- so that only orders with a real chance reach the lock and the database. An admitted order
-- takes a reservation: its units are pre-deducted while the instance that admitted it is alive,
-- not for good. A reservation names its instance, and the instance shows it is alive with a
-- heartbeat (beat.lua); once the heartbeat stops — the process died, or froze — any instance's
-- sweeper asks the database whether the order was written and returns the units if not
-- (orphans.lua, sweep.lua): a reservation is never a permanent decrement.
-- One call admits the buyers of one product that an instance has waiting, in the order given,
-- each answered exactly as if it had come alone (one call per buyer is a call of one).
-- KEYS[1] = seckill:{sku}:stock     the admission counter (the DB stock, minus reservations)
-- KEYS[2] = seckill:{sku}:buyers    the users admitted in this sale round
-- KEYS[3] = seckill:{sku}:reserved  hash: user -> "<reservation id>|<units>|<instance>|<Idempotency-Key>",
--           the reservations of orders in their instance's hands (a critical section)
-- KEYS[4] = seckill:{sku}:queued    the same, of reservations handed over to the order queue
--           (handover.lua): a writer resolves each, whichever instance it runs on
-- ARGV[1] = instance id; then per buyer: user id, quantity, reservation id, Idempotency-Key ('' without one),
--           and the most reservations the product may hold with this one (0: no bound)
-- Returns one answer per buyer: -1 counter missing (warm it from the database: every answer is
-- -1 then), 0 admitted, 1 sold out, 2 already purchased, 3 a request with this Idempotency-Key
-- holds the user's reservation (in flight: its answer is coming), 4 held: too few units left, but
-- orders in their sections hold some, and one that fails gives its units back — so not sold out
-- yet (the caller hears busy and retries), 5 waiting: units are left, but the product holds as
-- many reservations as the buyer's bound allows (a queued order waits behind them all; the
-- caller hears busy and retries). Sold out is final: answered only when no such order
-- could give a unit back, so no buyer who comes later buys one. Reservations handed over to the
-- queue do not hold the answer back: their orders are accepted, and a writer rejects one only
-- when the database disagrees.
local n = (#ARGV - 1) / 5
local out = {}
local stock = redis.call('GET', KEYS[1])
if not stock then
  for i = 1, n do
    out[i] = -1
  end
  return out
end
local left = tonumber(stock)
local taken = 0
local holding -- the product's reservations, counted once, at the first buyer with a bound
local function admit(user, qty, id, key, bound)
  if redis.call('SISMEMBER', KEYS[2], user) == 1 then
    if key ~= '' then
      local held = redis.call('HGET', KEYS[3], user) or redis.call('HGET', KEYS[4], user)
      if held and string.match(held, '^[^|]*|[^|]*|[^|]*|(.*)$') == key then
        return 3
      end
    end
    return 2
  end
  if left < qty then
    if redis.call('HLEN', KEYS[3]) > 0 then
      return 4
    end
    return 1
  end
  if bound > 0 then
    holding = holding or redis.call('HLEN', KEYS[3]) + redis.call('HLEN', KEYS[4])
    if holding >= bound then
      return 5
    end
  end
  left = left - qty
  taken = taken + qty
  redis.call('SADD', KEYS[2], user)
  local added = redis.call('HSET', KEYS[3], user, id .. '|' .. qty .. '|' .. ARGV[1] .. '|' .. key)
  if holding then
    holding = holding + added
  end
  return 0
end
for i = 1, n do
  local j = 5 * (i - 1) + 2
  out[i] = admit(ARGV[j], tonumber(ARGV[j + 1]), ARGV[j + 2], ARGV[j + 3], tonumber(ARGV[j + 4]))
end
if taken > 0 then
  redis.call('DECRBY', KEYS[1], taken)
end
return out
