-- stats: the room as a whole (clock.lua says how the line and its counter work).
-- Returns {'early', now, joined} or {'open', now, serving, next}.
if not opened() then
  return {'early', int(now), redis.call('ZCARD', early)}
end
local sv, next = serving()
return {'open', int(now), real(sv), next}
