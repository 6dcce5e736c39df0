-- Reads the admission state of one product, for the audit and the stranded-units gauge.
-- KEYS[1] = stock, KEYS[2] = reserved, KEYS[3] = queued (see admit.lua)
-- ARGV = the live instances (live.lua)
-- Returns the counter (false when there is none), the reservations in flight, their units, and
-- the units of those whose instance is alive.
local alive = {}
for i = 1, #ARGV do
  alive[ARGV[i]] = true
end
local count, units, live = 0, 0, 0
for k = 2, 3 do
  local held = redis.call('HGETALL', KEYS[k])
  count = count + #held / 2
  for i = 1, #held, 2 do
    local n, instance = string.match(held[i + 1], '^[^|]*|([^|]*)|([^|]*)|')
    n = tonumber(n)
    units = units + n
    if alive[instance] then
      live = live + n
    end
  end
end
return {redis.call('GET', KEYS[1]), count, units, live}
