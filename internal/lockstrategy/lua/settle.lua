-- Settles the reservations of orders the database has written: the units stay deducted, and
-- the reservation leaves the set the sweeper watches. A reservation that is no longer the one
-- given (already settled, swept, or replaced by a later one of the same user) is left alone.
-- KEYS[3], KEYS[4] = reservations, reserved (see admit.lua)
-- ARGV = user id, reservation id, user id, reservation id, ...
-- Returns how many reservations were settled.
local settled = 0
for i = 1, #ARGV, 2 do
  local held = redis.call('HGET', KEYS[4], ARGV[i])
  if held and string.match(held, '^([^|]*)|') == ARGV[i + 1] then
    redis.call('HDEL', KEYS[4], ARGV[i])
    redis.call('ZREM', KEYS[3], ARGV[i])
    settled = settled + 1
  end
end
return settled
