#!lua flags=allow-cross-slot-keys
-- cluster_module_probe.lua: (Redis Cluster) whether this node's neardup module runs ND.BUCKETS as
-- cluster_ops.lua sends it (_cluster_buckets_module.lua is prepended): one removal from a bucket that
-- does not exist, which writes nothing; and ND.LINK as cluster_sites.lua sends it (_link_module.lua):
-- no pairs, no cutoff, which touches no key. A module of another build that reports this release's
-- version answers an error here, and the node takes the Lua steps instead.
--
-- ARGV[1] a band family prefix no collection uses (one family, level 0)   ARGV[2] W, the ordinal width in bytes
-- ARGV[3] one band record (12 + W bytes) to remove
-- Returns the buckets created (0), or the first command's error

redis.call('ND.LINK', '1', ARGV[1] .. 'e:', ARGV[1] .. 'x:', ARGV[1] .. 'd:', 32, 120, '0', '-1', 16, 256, '')
return apply_buckets(ARGV[1], tonumber(ARGV[2]), 1, 1, 0, 1, '', ARGV[3], 8)
