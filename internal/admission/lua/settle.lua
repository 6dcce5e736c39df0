-- Settles the reservations of orders the database has written: the units stay deducted. One no
-- longer as given is left alone, unless the sweeper returned it while its frozen instance wrote
-- the order: then its units and buyer are taken again, once (the marker goes), so the counter
-- never offers a unit the database has sold.
-- KEYS[1..4] = stock, buyers, reserved, queued (see admit.lua)
-- KEYS[5..] = seckill:{sku}:swept:<reservation id>, one per order, in order
-- ARGV = user id, reservation id, units, ... (one triple per order)
-- Returns {reservations settled, reservations taken again after the sweeper}.
local settled, retaken = 0, 0
for i = 5, #KEYS do
  local j = 3 * (i - 5) + 1
  local user, id = ARGV[j], ARGV[j + 1]
  local hash = redis.call('HEXISTS', KEYS[3], user) == 1 and KEYS[3] or KEYS[4]
  local held = redis.call('HGET', hash, user)
  if held and string.match(held, '^([^|]*)|') == id then
    redis.call('HDEL', hash, user)
    settled = settled + 1
  elseif redis.call('DEL', KEYS[i]) == 1 then
    redis.call('SADD', KEYS[2], user)
    if redis.call('EXISTS', KEYS[1]) == 1 then
      redis.call('DECRBY', KEYS[1], ARGV[j + 2])
    end
    retaken = retaken + 1
  end
end
return {settled, retaken}
