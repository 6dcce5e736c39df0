-- An instance's heartbeat: it is alive, and its reservations hold their units, until its last
-- beat plus the TTL it states. By Redis's clock, so the instances' clocks do not matter.
-- Instances not heard of for an hour are forgotten.
-- KEYS[1] = seckill:instances  sorted set: instance -> alive until (Redis time, ms)
-- ARGV[1] = instance id, ARGV[2] = its TTL (ms)
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms - 3600000)
return 1
