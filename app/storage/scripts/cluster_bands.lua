#!lua flags=no-writes,allow-cross-slot-keys
-- cluster_bands.lua: (Redis Cluster) read many band buckets (or postings: the passage index's
-- families) on one node in one call.
--
-- ARGV[1] family prefix   ARGV[2] F, the number of families   ARGV[3] the level a family's groups
-- start at   ARGV[4] packed (4 + kw)-byte records (family number, 4 bytes big-endian; key, kw bytes);
-- _cluster_family.lua finds each one's group   ARGV[5] kw: a band key's 8 bytes, a fingerprint key's 4
-- Returns the bucket values in order ('' where absent)

local F, level0 = tonumber(ARGV[2]), tonumber(ARGV[3])
local hash = band_in_family(F)
local families, out = {}, {}
local blob, kw = ARGV[4], tonumber(ARGV[5])
for p = 1, #blob, 4 + kw do
  local key = ARGV[1] .. string.format('%d', struct.unpack('>I4', blob, p)) .. '}'
  local t = open_family(families, key, level0, hash)
  local field = string.sub(blob, p + 4, p + 3 + kw)
  out[#out + 1] = redis.call('HGET', family_group(t, field), field) or ''
end
return out
