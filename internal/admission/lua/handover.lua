-- Hands reservations over to the order queue (the queued strategy): their orders' messages went
-- out, so the writer that takes each message resolves it — settles it once the order is
-- written, gives it back once it is rejected — whichever instance that writer runs on. Until then
-- the reservation must hold its units even if the instance that admitted it dies: returning them
-- would sell the unit twice in Redis while its order still waits to be written (queued plus
-- active orders above the initial stock). The reservation moves to the queue's hash, which no
-- sweeper lists, and its owner becomes the queue, which every instance counts as alive
-- (Ledger.Live); id, units and key stay, so the writer's settle or give-back finds it as always
-- (by its id). Out of the reserved hash, it no longer holds a sold-out answer back (admit.lua).
-- KEYS[1] = reserved, KEYS[2] = queued (see admit.lua)
-- ARGV[1] = the queue's owner name, ARGV[2..] = user id, reservation id, ... (pairs)
-- Returns the reservations handed over (one already resolved, or replaced, is left alone).
local handed = 0
for i = 2, #ARGV, 2 do
  local held = redis.call('HGET', KEYS[1], ARGV[i])
  if held then
    local id, units, key = string.match(held, '^([^|]*)|([^|]*)|[^|]*|(.*)$')
    if id == ARGV[i + 1] then
      redis.call('HDEL', KEYS[1], ARGV[i])
      redis.call('HSET', KEYS[2], ARGV[i], id .. '|' .. units .. '|' .. ARGV[1] .. '|' .. key)
      handed = handed + 1
    end
  end
end
return handed
