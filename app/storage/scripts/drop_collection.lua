-- drop_collection.lua: unregister a collection and delete its state; its data keys are then unlinked
-- by the client in chunks (their names follow from the returned shape, no keyspace scan).
--
-- KEYS[1] registry hash   KEYS[2] the collection's state hash   KEYS[3] dropped generations (keys.DROPPED)
-- ARGV[1] name
-- The generation goes into KEYS[3] with its shape and this server's time, in the same step: if the
-- client dies before it has unlinked every data key, the next sweep finishes the job. The shape is
-- "<seq>:<band groups>:<id groups>:<ms>", then ":<site ids issued>" for a collection with sites.
-- Returns {'absent'} or {'dropped', gen, seq, band groups, id groups, passage index groups (0: none),
--   site ids issued (sseq)}

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {'absent'} end
local v = redis.call('HMGET', KEYS[2], 'gen', 'seq', 'bL', 'bS', 'iL', 'iS', 'pL', 'pS', 'sseq')
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
if not v[1] then return {'dropped', '', 0, 0, 0, 0} end
local bands, ids = 2 ^ tonumber(v[3]) + tonumber(v[4]), 2 ^ tonumber(v[5]) + tonumber(v[6])
local sites = tonumber(v[9]) or 0
local t = redis.call('TIME')
local shape = string.format('%d:%d:%d:%d', tonumber(v[2]), bands, ids,
  tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if sites > 0 then shape = shape .. string.format(':%d', sites) end
redis.call('HSET', KEYS[3], ARGV[1] .. ':' .. v[1], shape)
return {'dropped', v[1], tonumber(v[2]), bands, ids,
  v[7] and (2 ^ tonumber(v[7]) + tonumber(v[8])) or 0, sites}
