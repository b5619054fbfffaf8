#!lua flags=no-writes,allow-cross-slot-keys
-- cluster_bands.lua: (Redis Cluster) read many band buckets on one node in one call.
--
-- ARGV[1] band family prefix   ARGV[2] F, the number of families   ARGV[3] the level a family's
-- groups start at   ARGV[4] packed 12-byte records (family number, 4 bytes big-endian; band key, 8
-- bytes); _cluster_family.lua finds each one's group
-- Returns the bucket values in order ('' where absent)

local F, level0 = tonumber(ARGV[2]), tonumber(ARGV[3])
local hash = band_in_family(F)
local families, out = {}, {}
local blob = ARGV[4]
for p = 1, #blob, 12 do
  local key = ARGV[1] .. string.format('%d', struct.unpack('>I4', blob, p)) .. '}'
  local t = open_family(families, key, level0, hash)
  local field = string.sub(blob, p + 4, p + 11)
  out[#out + 1] = redis.call('HGET', family_group(t, field), field) or ''
end
return out
