-- Hands reservations over to the order queue: their messages went out, so the writer that takes
-- each resolves it. Until then it must hold its units even if its instance dies: returning them
-- would sell the unit twice. It moves to the queue's hash, which no sweeper lists, under the
-- queue's name; id, units and key stay, so the writer's settle or give-back finds it.
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
