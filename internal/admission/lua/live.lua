-- The instances alive now: those whose last beat plus TTL (beat.lua) has not passed, by Redis's
-- clock.
-- KEYS[1] = seckill:instances
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], ms, '+inf')
