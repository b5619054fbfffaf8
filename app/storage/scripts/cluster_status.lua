-- cluster_status.lua: (Redis Cluster) the stamps of candidate ordinals, read after our own stamp:
-- -1 for one still pending (not stamped: later than us, whatever happens next), -2 for a dead one
-- (its check was refused, cluster_stamp.lua: it is never stamped, and its band entries are dead).
--
-- KEYS[1] state hash   KEYS[2] pending hash   KEYS[3] late hash
-- ARGV[1] gen   ARGV[2] SCALE   ARGV[3..] ordinals
-- Returns {'ok', {stamp, -1 or -2 per ordinal}, seq, max documents, retention ms, the collection's
-- clock in ms (_clock.lua: expiry is judged by it)}
-- or {'nocollection'} / {'stale'}

local v = redis.call('HMGET', KEYS[1], 'gen', 'seq', 'maxd', 'ttl')
if not v[1] then return {'nocollection'} end
if v[1] ~= ARGV[1] then return {'stale'} end
local seq, scale = tonumber(v[2]), tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV do
  local o = tonumber(ARGV[i])
  if o > seq or redis.call('HEXISTS', KEYS[2], o) == 1 then
    out[#out + 1] = -1
  else
    local late = tonumber(redis.call('HGET', KEYS[3], o))
    if late == 0 then
      out[#out + 1] = -2
    else
      out[#out + 1] = late or o * scale
    end
  end
end
return {'ok', out, seq, tonumber(v[3]), tonumber(v[4]), clock_ms(KEYS[1])}
