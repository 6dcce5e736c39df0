-- Lists reservations whose lease ended more than a grace ago, by Redis's own clock (the same
-- clock that set the leases, so the instances' clocks do not matter).
-- KEYS[3], KEYS[4] = reservations, reserved (see admit.lua)
-- ARGV[1] = grace (ms), ARGV[2] = at most this many
-- Returns user id, reservation, user id, reservation, ... (the reservation as stored).
local now = redis.call('TIME')
local cutoff = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - tonumber(ARGV[1])
local users = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, user in ipairs(users) do
  local held = redis.call('HGET', KEYS[4], user)
  if held then
    out[#out + 1] = user
    out[#out + 1] = held
  else
    redis.call('ZREM', KEYS[3], user)
  end
end
return out
