-- drop_collection.lua: unregister a collection and delete its state; its data keys are then unlinked
-- by the client in chunks (their names follow from the returned shape, no keyspace scan).
--
-- KEYS[1] registry hash   KEYS[2] the collection's state hash
-- ARGV[1] name
-- Returns {'absent'} or {'dropped', gen, seq, band groups, id groups, passage index groups (0: none)}

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {'absent'} end
local v = redis.call('HMGET', KEYS[2], 'gen', 'seq', 'bL', 'bS', 'iL', 'iS', 'pL', 'pS')
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
if not v[1] then return {'dropped', '', 0, 0, 0} end
return {'dropped', v[1], tonumber(v[2]),
  2 ^ tonumber(v[3]) + tonumber(v[4]), 2 ^ tonumber(v[5]) + tonumber(v[6]),
  v[7] and (2 ^ tonumber(v[7]) + tonumber(v[8])) or 0}
