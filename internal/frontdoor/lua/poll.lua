-- poll: where buyer's ticket stands (clock.lua says how the line and its counter work). A buyer
-- the counter has passed is admitted: the first such poll records when the counter passed its
-- place and the expiry of its pass, which later polls repeat until the pass expires (then it is
-- renewed: the buyer keeps its admission).
-- ARGV[5] = buyer, ARGV[6] = ticket, ARGV[7] = pass TTL (s), ARGV[8] = '1' if sold out
-- Returns {'unknown'} (not this buyer's ticket); {'ended'}; {'early', ticket, now};
-- {'soldout'} (waiting, and nothing left to wait for); {'waiting', ticket, now, place, serving, next};
-- or {'admitted', ticket, now, place, serving, next, admitted at (µs), pass expiry (s)}.
local buyer, ticket, ttl, soldOut = ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8] == '1'
if redis.call('HGET', tickets, buyer) ~= ticket then
  return {'unknown'}
end
if ended() then
  return {'ended'}
end
if not opened() then
  return {'early', ticket, int(now)}
end
local place = placeOf(buyer)
local sv, next = serving()
if place > math.floor(sv) then
  if soldOut then
    return {'soldout'}
  end
  return {'waiting', ticket, int(now), place, real(sv), next}
end
local seconds = math.floor(now / 1e6)
local at, exp
local rec = redis.call('HGET', admitted, buyer)
if rec then
  at, exp = string.match(rec, '^([^|]*)|(.*)$')
  at, exp = tonumber(at), tonumber(exp)
  if exp <= seconds then
    exp = seconds + ttl
    redis.call('HSET', admitted, buyer, int(at) .. '|' .. int(exp))
  end
else
  at, exp = admittedAt(place), seconds + ttl
  redis.call('HSET', admitted, buyer, int(at) .. '|' .. int(exp))
end
return {'admitted', ticket, int(now), place, real(sv), next, int(at), int(exp)}
