-- cluster_fence.lua: (Redis Cluster) make pending ordinals dead, so that the checks that reserved them
-- can never commit them (cluster_stamp.lua refuses a batch with an ordinal no longer pending): a retry
-- that finds its stored copy still pending after waiting for it, and a check that gives up its own
-- reservation, call this. An ordinal already committed (stamped) or dead is left as it is, so a fence
-- and its owner's stamp, in either order, leave the ordinal either committed or dead, never both.
--
-- KEYS[1] state hash   KEYS[2] pending hash   KEYS[3] late hash
-- ARGV[1] gen   ARGV[2..] ordinals
-- Returns {'ok', {1 if made dead here, else 0, per ordinal}} or {'nocollection'} / {'stale'}

local gen = redis.call('HGET', KEYS[1], 'gen')
if not gen then return {'nocollection'} end
if gen ~= ARGV[1] then return {'stale'} end
local out = {}
for i = 2, #ARGV do
  if redis.call('HDEL', KEYS[2], ARGV[i]) == 1 then
    redis.call('HSET', KEYS[3], ARGV[i], 0)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return {'ok', out}
