-- Gives admission back the units and buyers of orders the database has ended (cancelled,
-- expired). Once per order: only the first call sets the marker seckill:{sku}:returned:<order>,
-- so a relay repeated by another instance, or after a lost answer, returns nothing more.
-- KEYS[1] = stock, KEYS[2] = buyers, KEYS[3..] = the orders' markers
-- ARGV = user id, units, user id, units, ... (one pair per marker, in order)
-- Returns the units returned.
local returned = 0
for i = 3, #KEYS do
  local user, units = ARGV[2 * (i - 2) - 1], ARGV[2 * (i - 2)]
  if redis.call('SET', KEYS[i], '1', 'NX', 'EX', 3600) then
    redis.call('SREM', KEYS[2], user)
    if redis.call('EXISTS', KEYS[1]) == 1 then
      redis.call('INCRBY', KEYS[1], units)
      returned = returned + tonumber(units)
    end
  end
end
return returned
