#!lua flags=no-writes,allow-cross-slot-keys
-- cluster_ids.lua: (Redis Cluster) read many ids on one node in one call: each id's ordinal from the
-- id table's family that holds it (_cluster_family.lua finds its group).
--
-- ARGV[1] F, the id families   ARGV[2] the level a family's groups start at   then pairs (the
-- family's shape key, id)
-- Returns the ordinals in order ('' where absent)

local hash = id_in_family(tonumber(ARGV[1]))
local level0 = tonumber(ARGV[2])
local families, out = {}, {}
for i = 3, #ARGV, 2 do
  local t = open_family(families, ARGV[i], level0, hash)
  out[#out + 1] = redis.call('HGET', family_group(t, ARGV[i + 1]), ARGV[i + 1]) or ''
end
return out
