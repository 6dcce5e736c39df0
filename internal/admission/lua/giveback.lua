-- Gives an admitted order's reservation back after its database step failed: the units return
-- to the counter and the buyer may try again.
-- KEYS[1..4] = stock, buyers, reserved, queued (see admit.lua)
-- KEYS[5] = seckill:{sku}:swept:<reservation id>, the sweeper's marker (sweep.lua)
-- ARGV[1] = user id, ARGV[2] = reservation id
-- ARGV[3] = optional cap: the stock the database reported with sold out, which closes admission
-- to the losers to come, never below what the database still holds.
-- Exactly once: only the removal of this very reservation returns units. A missing counter
-- (flushed, reset) stays missing: INCRBY would invent one.
-- Returns 1 when the units went back, 0 when the reservation was already gone.
local hash = redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 and KEYS[3] or KEYS[4]
local id, units = string.match(redis.call('HGET', hash, ARGV[1]) or '', '^([^|]*)|([^|]*)|')
if id ~= ARGV[2] then
  redis.call('DEL', KEYS[5])
  return 0
end
redis.call('HDEL', hash, ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then
  local left = redis.call('INCRBY', KEYS[1], units)
  if ARGV[3] and tonumber(ARGV[3]) < left then
    redis.call('SET', KEYS[1], ARGV[3])
  end
end
return 1
