-- Lists the reservations a sweeper may have to resolve: those whose instance is not alive, and
-- the sweeping instance's own, which it checks against its orders in flight. An instance that
-- beats again meanwhile is kept safe by the database and the sweeper's marker (sweep.lua).
-- KEYS[1] = reserved (see admit.lua)
-- ARGV[1] = at most this many of other instances, ARGV[2] = the sweeping instance,
-- ARGV[3..] = the live instances
-- Returns user id, reservation, user id, reservation, ... (the reservation as stored).
local live = {}
for i = 3, #ARGV do
  live[ARGV[i]] = true
end
local limit, others = tonumber(ARGV[1]), 0
local out = {}
local held = redis.call('HGETALL', KEYS[1])
for i = 1, #held, 2 do
  local instance = string.match(held[i + 1], '^[^|]*|[^|]*|([^|]*)|')
  local own = instance == ARGV[2]
  if own or (not live[instance] and others < limit) then
    out[#out + 1] = held[i]
    out[#out + 1] = held[i + 1]
    if not own then
      others = others + 1
    end
  end
end
return out
