#!lua flags=no-writes,allow-cross-slot-keys
-- cluster_get.lua: (Redis Cluster) many HGETs on one node in one call (keys in ARGV, see cluster_ops.lua).
--
-- ARGV: key, field, key, field, ...
-- Returns the values in order, '' where absent

local out = {}
for i = 1, #ARGV, 2 do out[#out + 1] = redis.call('HGET', ARGV[i], ARGV[i + 1]) or '' end
return out
