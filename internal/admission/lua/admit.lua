-- Redis fast admission: one atomic step that rejects sold-out and repeat buyers at memory speed,
-- so that only orders with a real chance reach the lock and the database. An admitted order
-- takes a reservation: its units are pre-deducted while the instance that admitted it is alive,
-- not for good. A reservation names its instance, and the instance shows it is alive with a
-- heartbeat (beat.lua); once the heartbeat stops — the process died, or froze — any instance's
-- sweeper asks the database whether the order was written and returns the units if not
-- (orphans.lua, sweep.lua): a reservation is never a permanent decrement.
-- KEYS[1] = seckill:{sku}:stock     the admission counter (the DB stock, minus reservations)
-- KEYS[2] = seckill:{sku}:buyers    the users admitted in this sale round
-- KEYS[3] = seckill:{sku}:reserved  hash: user -> "<reservation id>|<units>|<instance>|<Idempotency-Key>",
--           the reservations of orders in their instance's hands (a critical section)
-- KEYS[4] = seckill:{sku}:queued    the same, of reservations handed over to the order queue
--           (handover.lua): a writer resolves each, whichever instance it runs on
-- ARGV[1] = user id, ARGV[2] = quantity, ARGV[3] = reservation id, ARGV[4] = instance id,
-- ARGV[5] = Idempotency-Key ('' without one)
-- Returns -1 counter missing (warm it from the database), 0 admitted, 1 sold out,
-- 2 already purchased, 3 a request with this Idempotency-Key holds the user's reservation (in
-- flight: its answer is coming), 4 held: too few units left, but orders in their sections hold
-- some, and one that fails gives its units back — so not sold out yet (the caller hears busy and
-- retries). Sold out is final: answered only when no such order could give a unit back, so no
-- buyer who comes later buys one. Reservations handed over to the queue do not hold the answer
-- back: their orders are accepted, and a writer rejects one only when the database disagrees.
local stock = redis.call('GET', KEYS[1])
if not stock then
  return -1
end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  if ARGV[5] ~= '' then
    local held = redis.call('HGET', KEYS[3], ARGV[1]) or redis.call('HGET', KEYS[4], ARGV[1])
    if held then
      local key = string.match(held, '^[^|]*|[^|]*|[^|]*|(.*)$')
      if key == ARGV[5] then
        return 3
      end
    end
  end
  return 2
end
local qty = tonumber(ARGV[2])
if tonumber(stock) < qty then
  if redis.call('HLEN', KEYS[3]) > 0 then
    return 4
  end
  return 1
end
redis.call('DECRBY', KEYS[1], qty)
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3] .. '|' .. ARGV[2] .. '|' .. ARGV[4] .. '|' .. ARGV[5])
return 0
