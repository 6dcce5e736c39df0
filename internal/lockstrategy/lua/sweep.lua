-- Resolves expired reservations as the database decided: one whose order exists is settled
-- (its units stay sold); one without an order returns its units and its buyer — once: only a
-- reservation still exactly as the sweeper read it is touched, so a give-back, a settle or
-- another instance's sweeper that got there first wins, and nothing is returned twice.
-- KEYS = stock, buyers, reservations, reserved (see admit.lua)
-- ARGV = user id, reservation as read, placed (1 or 0), ...
-- Returns {units returned to the counter, reservations returned, reservations settled}.
local units, returned, settled = 0, 0, 0
for i = 1, #ARGV, 3 do
  local user, held = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', KEYS[4], user) == held then
    redis.call('HDEL', KEYS[4], user)
    redis.call('ZREM', KEYS[3], user)
    if ARGV[i + 2] == '1' then
      settled = settled + 1
    else
      returned = returned + 1
      redis.call('SREM', KEYS[2], user)
      if redis.call('EXISTS', KEYS[1]) == 1 then
        local n = tonumber(string.match(held, '^[^|]*|([^|]*)|'))
        redis.call('INCRBY', KEYS[1], n)
        units = units + n
      end
    end
  end
end
return {units, returned, settled}
