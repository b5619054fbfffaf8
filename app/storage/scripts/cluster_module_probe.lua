#!lua flags=allow-cross-slot-keys
-- cluster_module_probe.lua: (Redis Cluster) whether this node's neardup module runs ND.BUCKETS as
-- cluster_ops.lua sends it (_cluster_buckets_module.lua is prepended): one removal from a bucket that
-- does not exist, which writes nothing. A module of another build that reports this release's version
-- answers an error here, and the node takes the Lua band records instead.
--
-- ARGV[1] a band family prefix no collection uses (one family, level 0)   ARGV[2] W, the ordinal width in bytes
-- ARGV[3] one band record (12 + W bytes) to remove
-- Returns the buckets created (0), or the command's error

return apply_buckets(ARGV[1], tonumber(ARGV[2]), 1, 1, 0, 1, '', ARGV[3], 8)
