-- cluster_window.lua: (Redis Cluster) what retention may reclaim, read in one step: the state's
-- watermark, sequence and limits, and the first pending ordinal (its record may not be written yet,
-- so the window stops below it). One script, so no reservation or stamp falls between the two reads.
--
-- KEYS[1] state hash   KEYS[2] pending hash   KEYS[3] late hash (unused)
-- ARGV[1] gen
-- Returns {'ok', low, seq, max documents, retention ms, first pending ordinal or 0}
-- or {'nocollection'} / {'stale'}

local v = redis.call('HMGET', KEYS[1], 'gen', 'low', 'seq', 'maxd', 'ttl')
if not v[1] then return {'nocollection'} end
if v[1] ~= ARGV[1] then return {'stale'} end
local first = 0
for _, o in ipairs(redis.call('HKEYS', KEYS[2])) do
  local n = tonumber(o)
  if first == 0 or n < first then first = n end
end
return {'ok', tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[4]) or 0, tonumber(v[5]) or 0, first}
