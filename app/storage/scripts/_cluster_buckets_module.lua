-- _cluster_buckets_module.lua: cluster_ops.lua's band records as one ND.BUCKETS command of neardup's
-- Valkey module (native/valkey/buckets.cpp): the same contract and data as _cluster_buckets_lua.lua
-- (ordinals of 5 bytes, the module's: `w` is 5). A node that lost the module fails here, before the
-- script writes anything.
local function apply_buckets(prefix, w, cap, F, level0, target, appends, removals, kw)
  if #appends + #removals == 0 then return 0 end
  return redis.call('ND.BUCKETS', '1', prefix, cap, F, level0, target, appends, removals, kw)
end
