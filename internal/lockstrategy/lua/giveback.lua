-- Gives an admitted order's pre-deduction back after its database step failed.
-- KEYS[1] = seckill:{sku}:stock, KEYS[2] = seckill:{sku}:buyers
-- ARGV[1] = user id, ARGV[2] = units to return
-- ARGV[3] = optional cap: the stock the database reported when it said sold out. The counter was
-- then too high; capping it there closes admission for the losers to come without ever pushing
-- it below what the database still holds (which would leave units unsold).
-- Idempotent per order: a user holds one admission per product, and only the removal of that
-- admission returns units, so a repeated give-back returns nothing. A missing counter (flushed,
-- or invalidated by a reset) is not recreated: INCRBY on a missing key would invent a counter.
if redis.call('SREM', KEYS[2], ARGV[1]) == 1 then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    local left = redis.call('INCRBY', KEYS[1], ARGV[2])
    if ARGV[3] and tonumber(ARGV[3]) < left then
      redis.call('SET', KEYS[1], ARGV[3])
    end
  end
  return 1
end
return 0
