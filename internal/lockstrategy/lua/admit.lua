-- Redis fast admission: one atomic step that rejects sold-out and repeat buyers at memory speed,
-- so that only orders with a real chance reach the lock and the database.
-- KEYS[1] = seckill:{sku}:stock   the admission counter (a pre-deduction of the DB stock)
-- KEYS[2] = seckill:{sku}:buyers  the users admitted in this sale round
-- ARGV[1] = user id, ARGV[2] = quantity
-- Returns -1 counter missing (warm it from the database), 0 admitted, 1 sold out,
-- 2 already purchased.
local stock = redis.call('GET', KEYS[1])
if not stock then
  return -1
end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return 2
end
local qty = tonumber(ARGV[2])
if tonumber(stock) < qty then
  return 1
end
redis.call('DECRBY', KEYS[1], qty)
redis.call('SADD', KEYS[2], ARGV[1])
return 0
