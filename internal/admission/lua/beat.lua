-- An instance's heartbeat: the instance is alive until its last beat plus its TTL, and its
-- reservations (admit.lua) hold their units as long as it is. By Redis's own clock, so the
-- instances' clocks do not matter; each instance states its own TTL. Instances not heard of for
-- an hour are forgotten.
-- KEYS[1] = seckill:instances  sorted set: instance -> alive until (Redis time, ms)
-- ARGV[1] = instance id, ARGV[2] = its TTL (ms)
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms - 3600000)
return 1
