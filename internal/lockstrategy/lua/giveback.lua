-- Gives an admitted order's reservation back after its database step failed: the units return
-- to the counter and the buyer may try again.
-- KEYS = stock, buyers, reservations, reserved (see admit.lua)
-- ARGV[1] = user id, ARGV[2] = reservation id
-- ARGV[3] = optional cap: the stock the database reported when it said sold out. The counter was
-- then too high; capping it there closes admission for the losers to come without ever pushing
-- it below what the database still holds (which would leave units unsold).
-- Exactly once per reservation: only the removal of this very reservation (its id) returns
-- units, so a repeated give-back, or one racing the sweeper, returns nothing. A missing counter
-- (flushed, or invalidated by a reset) is not recreated: INCRBY on a missing key would invent one.
-- Returns 1 when the units went back, 0 when the reservation was already gone.
local held = redis.call('HGET', KEYS[4], ARGV[1])
if not held then
  return 0
end
local id, units = string.match(held, '^([^|]*)|([^|]*)|')
if id ~= ARGV[2] then
  return 0
end
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then
  local left = redis.call('INCRBY', KEYS[1], units)
  if ARGV[3] and tonumber(ARGV[3]) < left then
    redis.call('SET', KEYS[1], ARGV[3])
  end
end
return 1
