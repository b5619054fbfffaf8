#!lua flags=no-writes,allow-cross-slot-keys
-- cluster_bands.lua: (Redis Cluster) read many band buckets on one node in one call.
--
-- ARGV[1] band group prefix   ARGV[2] packed 12-byte records (group number, 4 bytes big-endian;
--   band key, 8 bytes)
-- Returns the bucket values in order ('' where absent)

local out = {}
local blob = ARGV[2]
for p = 1, #blob, 12 do
  local key = ARGV[1] .. string.format('%d', struct.unpack('>I4', blob, p))
  out[#out + 1] = redis.call('HGET', key, string.sub(blob, p + 4, p + 11)) or ''
end
return out
