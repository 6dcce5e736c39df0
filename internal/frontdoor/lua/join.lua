-- join: buyer joins the line, once (clock.lua says how the line and its counter work).
-- ARGV[5] = buyer, ARGV[6] = a new ticket, ARGV[7] = a random score (used if the doors are shut)
-- Returns {'ended'}; {'early', ticket, now}; or {'in', ticket, now, place, serving, next}.
local buyer, fresh, score = ARGV[5], ARGV[6], ARGV[7]
if ended() then
  return {'ended'}
end
local open = opened()
local ticket = redis.call('HGET', tickets, buyer)
if not ticket then
  ticket = fresh
  redis.call('HSET', tickets, buyer, ticket)
  if open then
    local sv, next = serving()
    if sv > next + 1 then
      -- An idle line: the counter restarts one place ahead of it, at this join.
      segment(next + 1, now, rate)
    end
    redis.call('HSET', places, buyer, redis.call('HINCRBY', state, 'next', 1))
  else
    redis.call('ZADD', early, score, buyer)
  end
end
if not open then
  return {'early', ticket, int(now)}
end
local place = placeOf(buyer)
local sv, next = serving()
return {'in', ticket, int(now), place, real(sv), next}
