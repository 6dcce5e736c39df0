-- Lists the reservations whose instance is not alive: it died or froze before their order was
-- written or given back. The live instances come from the heartbeats (live.lua), read just
-- before; an instance that beats again in between only finds its reservations swept, which the
-- database's guard and the sweeper's marker make safe (sweep.lua).
-- KEYS[1] = reserved (see admit.lua)
-- ARGV[1] = at most this many, ARGV[2..] = the live instances
-- Returns user id, reservation, user id, reservation, ... (the reservation as stored).
local live = {}
for i = 2, #ARGV do
  live[ARGV[i]] = true
end
local limit = tonumber(ARGV[1])
local out = {}
local held = redis.call('HGETALL', KEYS[1])
for i = 1, #held, 2 do
  local instance = string.match(held[i + 1], '^[^|]*|[^|]*|([^|]*)|')
  if not live[instance] then
    out[#out + 1] = held[i]
    out[#out + 1] = held[i + 1]
    if #out >= 2 * limit then
      break
    end
  end
end
return out
