-- cluster_drop.lua: (Redis Cluster) delete a collection's state; the client then unlinks its data
-- keys, named from the returned shape (no keyspace scan).
--
-- KEYS[1] state hash   KEYS[2] pending hash   KEYS[3] late hash
-- Returns {gen, seq, band groups, id groups, registry entry} or {} if there was no state

local v = redis.call('HMGET', KEYS[1], 'gen', 'seq', 'bG', 'iG', 'params')
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
if not v[1] then return {} end
return {v[1], tonumber(v[2]), tonumber(v[3]), tonumber(v[4]), v[5] or ''}
