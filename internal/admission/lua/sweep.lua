-- Resolves orphaned reservations as the database decided: settled if the order exists, else its
-- units and buyer returned, once: only a reservation still exactly as read is touched. A
-- returned one leaves a marker, so that if its order is written after all (its instance was
-- frozen), the settle takes the units again and a give-back returns nothing. One another
-- sweeper returned while its order was in fact written is taken again here too.
-- KEYS[1..4] = stock, buyers, reserved, queued (see admit.lua); only reserved is swept
-- KEYS[5..] = seckill:{sku}:swept:<reservation id>, one per reservation, in order
-- ARGV = user id, reservation as read, placed (1 or 0), ... (one triple per reservation)
-- Returns {units returned, reservations returned, settled, taken again}.
local units, returned, settled, retaken = 0, 0, 0, 0
for i = 5, #KEYS do
  local j = 3 * (i - 5) + 1
  local user, held = ARGV[j], ARGV[j + 1]
  local n = tonumber(string.match(held, '^[^|]*|([^|]*)|'))
  if redis.call('HGET', KEYS[3], user) == held then
    redis.call('HDEL', KEYS[3], user)
    if ARGV[j + 2] == '1' then
      settled = settled + 1
    else
      returned = returned + 1
      redis.call('SREM', KEYS[2], user)
      redis.call('SET', KEYS[i], '1', 'EX', 3600)
      if redis.call('EXISTS', KEYS[1]) == 1 then
        redis.call('INCRBY', KEYS[1], n)
        units = units + n
      end
    end
  elseif ARGV[j + 2] == '1' and redis.call('DEL', KEYS[i]) == 1 then
    redis.call('SADD', KEYS[2], user)
    if redis.call('EXISTS', KEYS[1]) == 1 then
      redis.call('DECRBY', KEYS[1], n)
    end
    retaken = retaken + 1
  end
end
return {units, returned, settled, retaken}
