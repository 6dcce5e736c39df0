-- Admission of a checkout on one Redis: every line admitted, or none — one atomic step over the
-- keys of several products (admit.lua's four per product), which Redis Cluster refuses (the
-- products' keys sit in different slots; there the caller admits line by line). Each line is
-- judged as admit.lua judges an order, all before any is taken: a line refused leaves every
-- product untouched.
-- KEYS[4*(i-1)+1 .. 4*i] = line i's product: stock, buyers, reserved, queued (admit.lua)
-- ARGV[1] = instance id, ARGV[2] = user id, ARGV[3] = Idempotency-Key ('' without one),
-- ARGV[4] = the most reservations a product may hold with this line (0: no bound);
-- then per line: quantity, reservation id
-- Returns one answer per line, admit.lua's codes: -1 counter missing (warm it; no line taken),
-- 0 admitted (every line is, or none), or the line's refusal — 1 sold out, 2 already purchased,
-- 3 in flight, 4 held, 5 waiting — with 0 for a line that would have been admitted.
local n = #KEYS / 4
local user, key, bound = ARGV[2], ARGV[3], tonumber(ARGV[4])
local out, missing, refused = {}, false, false
for i = 1, n do
  local k = 4 * (i - 1)
  local qty = tonumber(ARGV[3 + 2 * i])
  local stock = redis.call('GET', KEYS[k + 1])
  out[i] = 0
  if not stock then
    out[i] = -1
    missing = true
  elseif redis.call('SISMEMBER', KEYS[k + 2], user) == 1 then
    out[i] = 2
    if key ~= '' then
      local held = redis.call('HGET', KEYS[k + 3], user) or redis.call('HGET', KEYS[k + 4], user)
      if held and string.match(held, '^[^|]*|[^|]*|[^|]*|(.*)$') == key then
        out[i] = 3
      end
    end
  elseif tonumber(stock) < qty then
    out[i] = 1
    if redis.call('HLEN', KEYS[k + 3]) > 0 then
      out[i] = 4
    end
  elseif bound > 0 and redis.call('HLEN', KEYS[k + 3]) + redis.call('HLEN', KEYS[k + 4]) >= bound then
    out[i] = 5
  end
  refused = refused or out[i] > 0
end
if missing or refused then
  return out
end
for i = 1, n do
  local k = 4 * (i - 1)
  local qty = tonumber(ARGV[3 + 2 * i])
  redis.call('SADD', KEYS[k + 2], user)
  redis.call('HSET', KEYS[k + 3], user, ARGV[4 + 2 * i] .. '|' .. qty .. '|' .. ARGV[1] .. '|' .. key)
  redis.call('DECRBY', KEYS[k + 1], qty)
end
return out
