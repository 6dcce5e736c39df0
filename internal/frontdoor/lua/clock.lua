-- The waiting room of one product: its line and its serving counter, on Redis's clock alone.
-- This file opens join.lua, poll.lua and stats.lua (room.go joins them), so that every answer
-- of the room is computed the same way, in one atomic step, whichever instance asks.
--
-- A buyer's place in line is a number from 1. Those who joined before the doors opened hold a
-- random score (early, drawn by their instance from crypto/rand at the join) and their place is
-- their rank by it: the order is fixed in the data as they join, so the "shuffle" at the start
-- is no step at all — no two instances can make two orders, and no crash can leave half of one.
-- After the start a place is the next number (arrival order).
--
-- The serving counter says how many places are admitted: it runs at admit_per_s from the
-- start, as a function of Redis's TIME, read by whichever call comes — no instance drives it,
-- so one killed, paused or restarted changes neither the rate nor the order, and a buyer
-- admitted who never buys holds no one back. It runs in segments (base, since, rate): a new one
-- starts when the rate changes, and when someone joins a line the counter has run past (an
-- idle line), at one place ahead of the line — the newcomer comes in at once, a crowd after it
-- at the rate, not in a burst of the time saved up while nobody waited.
--
-- KEYS[1] = seckill:{sku}:room:state     hash: next (places handed out) and the current segment:
--           serving = base + rate * (now - since); absent until the doors open
-- KEYS[2] = seckill:{sku}:room:early     zset: buyer -> random score, those who joined before the start
-- KEYS[3] = seckill:{sku}:room:tickets   hash: buyer -> ticket (one per buyer)
-- KEYS[4] = seckill:{sku}:room:places    hash: buyer -> place, those who joined after the start
-- KEYS[5] = seckill:{sku}:room:admitted  hash: buyer -> "<admitted at, µs>|<pass expiry, s>"
-- KEYS[6] = seckill:{sku}:room:segments  zset: base -> "since|rate|base", every segment, so that
--           when the counter passed a place is exact however late its buyer asks
-- ARGV[1] = starts_at (µs; 0: none), ARGV[2] = ends_at (µs; 0: none), ARGV[3] = admit_per_s,
-- ARGV[4] = '' (a planted bug's instance id otherwise: room.go)
local state, early, tickets, places, admitted, segments = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local startsAt, endsAt, rate, own = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function int(x)
  return string.format('%.0f', x)
end

local function real(x)
  return string.format('%.17g', x)
end

local function ended()
  return endsAt > 0 and now >= endsAt
end

-- segment starts the counter at base places, now (or at since), at rate r. The members sort by
-- since (16 digits of µs) among equal bases, so the latest of them is found first.
local function segment(base, since, r)
  redis.call('HSET', state, 'base', real(base), 'since', int(since), 'rate', real(r))
  redis.call('ZADD', segments, real(base), int(since) .. '|' .. real(r) .. '|' .. real(base))
end

-- opened says whether the doors are open, opening them at the first call at or after the
-- start: the early joiners take places 1..n by their scores, and the counter starts at the
-- start itself (not at this call), so a late first call finds them admitted on schedule. It
-- starts at one place: the first in line comes in as the doors open, the next 1/rate later.
local function opened()
  if redis.call('HEXISTS', state, 'next') == 1 then
    return true
  end
  if startsAt > 0 and now < startsAt then
    return false
  end
  local since = now
  if startsAt > 0 then
    since = startsAt
  end
  redis.call('HSET', state, 'next', redis.call('ZCARD', early))
  segment(1, since, rate)
  return true
end

-- placeOf is buyer's place in line, or nil.
local function placeOf(buyer)
  local rank = redis.call('ZRANK', early, buyer)
  if rank then
    return rank + 1
  end
  return tonumber(redis.call('HGET', places, buyer))
end

-- serving is the counter now (a real number: floor(serving) places are admitted; it may run
-- past the line while nobody waits), and the places handed out.
local function serving()
  local s = redis.call('HMGET', state, 'next', 'base', 'since', 'rate')
  local next, base, since, r = tonumber(s[1]), tonumber(s[2]), tonumber(s[3]), tonumber(s[4])
  local sv
  if own == '' then
    sv = base + r * math.max(0, now - since) / 1e6
  else
    -- Planted (admission-per-instance): each instance adds the time since its own last call,
    -- so the counter runs at the rate times the number of instances.
    local mine = tonumber(redis.call('HGET', state, 'since:' .. own) or since)
    sv = base + r * math.max(0, now - mine) / 1e6
    redis.call('HSET', state, 'base', real(sv), 'since:' .. own, int(now))
  end
  if r ~= rate then
    -- A new rate counts from now, from the places already admitted: the counter never jumps.
    sv = math.min(sv, next + 1)
    segment(sv, now, rate)
  end
  return sv, next
end

-- admittedAt is when the counter passed place (µs), from the segment it passed it in.
local function admittedAt(place)
  local seg = redis.call('ZREVRANGEBYSCORE', segments, place, '-inf', 'LIMIT', 0, 1)[1]
  local since, r, base = string.match(seg, '^([^|]*)|([^|]*)|(.*)$')
  return math.floor(tonumber(since) + (place - tonumber(base)) * 1e6 / tonumber(r))
end
