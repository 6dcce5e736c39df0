-- Redis fast admission: one atomic step that rejects sold-out and repeat buyers at memory speed,
-- so that only orders with a real chance reach the lock and the database. An admitted order's
-- units are reserved while its instance beats (beat.lua), then swept (sweep.lua).
-- One call admits requests (a line per product) of one set of products, each as if alone, and
-- whole or not at all: every line is judged before any is taken.
-- KEYS[4*(p-1)+1 .. 4*p] = product p of the set, in SKU order:
--   seckill:{sku}:stock     the admission counter (the DB stock, minus reservations)
--   seckill:{sku}:buyers    the users admitted in this sale round
--   seckill:{sku}:reserved  hash: user -> "<reservation id>|<units>|<instance>|<Idempotency-Key>",
--                           the reservations of orders in their instance's hands
--   seckill:{sku}:queued    the same, of reservations handed over to the order queue (handover.lua)
-- ARGV[1] = instance id; then per request: user id, Idempotency-Key ('' without one), the most
--   reservations each product may hold with it (0: no bound), and per product: quantity,
--   reservation id
-- Returns one answer per line, request after request: -1 counter missing (warm it; nothing is
-- taken), 0 admitted (or would be, beside a refused line), 1 sold out, 2 already purchased,
-- 3 this Idempotency-Key holds the user's reservation (in flight), 4 held: too few units left,
-- but orders in their sections may give some back (busy), 5 waiting: the bound is reached
-- (busy). Sold out is final: answered only when no order in its section could give a unit back
-- (a handed-over one is not waited for: its order is accepted).
local n = #KEYS / 4
local out = {}
-- judge answers user's line of qty units of the product whose keys start at KEYS[k].
local function judge(k, user, key, qty, bound)
  local stock = redis.call('GET', KEYS[k])
  if not stock then
    return -1
  end
  if redis.call('SISMEMBER', KEYS[k + 1], user) == 1 then
    if key ~= '' then
      local held = redis.call('HGET', KEYS[k + 2], user) or redis.call('HGET', KEYS[k + 3], user)
      if held and string.match(held, '^[^|]*|[^|]*|[^|]*|(.*)$') == key then
        return 3
      end
    end
    return 2
  end
  if tonumber(stock) < qty then
    if redis.call('HLEN', KEYS[k + 2]) > 0 then
      return 4
    end
    return 1
  end
  if bound > 0 and redis.call('HLEN', KEYS[k + 2]) + redis.call('HLEN', KEYS[k + 3]) >= bound then
    return 5
  end
  return 0
end
for j = 2, #ARGV, 3 + 2 * n do
  local user, key, bound = ARGV[j], ARGV[j + 1], tonumber(ARGV[j + 2])
  local first, refused = #out, false
  for p = 1, n do
    out[first + p] = judge(4 * p - 3, user, key, tonumber(ARGV[j + 1 + 2 * p]), bound)
    refused = refused or out[first + p] ~= 0
  end
  if not refused then
    for p = 1, n do
      local k, qty = 4 * p - 3, ARGV[j + 1 + 2 * p]
      redis.call('SADD', KEYS[k + 1], user)
      redis.call('HSET', KEYS[k + 2], user, ARGV[j + 2 + 2 * p] .. '|' .. qty .. '|' .. ARGV[1] .. '|' .. key)
      redis.call('DECRBY', KEYS[k], qty)
    end
  end
end
return out
