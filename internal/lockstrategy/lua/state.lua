-- Reads the admission state of one product for the audit and the stranded-units gauge, in one
-- step and by Redis's own clock (the clock that set the leases).
-- KEYS = stock, buyers, reservations, reserved (see admit.lua)
-- Returns the counter (false when there is none), the reservations in flight, their units, and
-- the units of those whose lease has not ended.
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local units, live = 0, 0
local held = redis.call('HGETALL', KEYS[4])
for i = 1, #held, 2 do
  local n = tonumber(string.match(held[i + 1], '^[^|]*|([^|]*)|'))
  units = units + n
  local ends = redis.call('ZSCORE', KEYS[3], held[i])
  if ends and tonumber(ends) > ms then
    live = live + n
  end
end
return {redis.call('GET', KEYS[1]), #held / 2, units, live}
