-- Sets the admission state from the database (the source of truth).
-- KEYS = stock, buyers, reserved, queued (see admit.lua)
-- ARGV[1] = 'nx' (never overwrite a live counter) or 'force' (a reset or reconcile)
-- ARGV[2] = stock in the database, ARGV[3..] = users holding an order
-- The reservations go too: the new counter is the database's stock, which still holds the units
-- of orders in flight, so their give-backs must find nothing to return.
-- Returns 1 when the state was written, 0 when a live counter was left alone.
if ARGV[1] == 'nx' then
  if not redis.call('SET', KEYS[1], ARGV[2], 'NX') then
    return 0
  end
else
  redis.call('SET', KEYS[1], ARGV[2])
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
local chunk = 1000
for i = 3, #ARGV, chunk do
  redis.call('SADD', KEYS[2], unpack(ARGV, i, math.min(i + chunk - 1, #ARGV)))
end
return 1
