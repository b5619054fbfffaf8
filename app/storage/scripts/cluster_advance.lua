-- cluster_advance.lua: (Redis Cluster) after reclaiming expired or evicted documents: move the
-- watermark `low` up (never down) and count the removed documents out.
--
-- KEYS[1] state hash   KEYS[2] pending hash (unused)   KEYS[3] late hash
-- ARGV[1] gen   ARGV[2] new low   ARGV[3] documents removed   ARGV[4..] reclaimed ordinals
--   (their late entries go, dead marks too: their records are gone, so nothing of them is seen again)
-- Returns 'ok', or 'stale' when the collection is gone or was recreated

local v = redis.call('HMGET', KEYS[1], 'gen', 'low')
if v[1] ~= ARGV[1] then return 'stale' end
if tonumber(ARGV[2]) > tonumber(v[2]) then redis.call('HSET', KEYS[1], 'low', ARGV[2]) end
if tonumber(ARGV[3]) ~= 0 then redis.call('HINCRBY', KEYS[1], 'docs', -tonumber(ARGV[3])) end
for i = 4, #ARGV do redis.call('HDEL', KEYS[3], ARGV[i]) end
return 'ok'
