-- Reads the admission state of one product for the audit, in one step.
-- KEYS = stock, buyers, reservations, reserved (see admit.lua)
-- Returns the counter (false when there is none), the reservations in flight, their units.
local units = 0
local held = redis.call('HVALS', KEYS[4])
for _, h in ipairs(held) do
  units = units + tonumber(string.match(h, '^[^|]*|([^|]*)|'))
end
return {redis.call('GET', KEYS[1]), #held, units}
