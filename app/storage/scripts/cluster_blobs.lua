#!lua flags=no-writes,allow-cross-slot-keys
-- cluster_blobs.lua: (Redis Cluster) whole passage blobs on one node in one call: a blob is kept in
-- parts of ARGV[1] bytes (keys.PASSAGE_PART), part j in the field `first + step * j` of its hash, and
-- ends at its first part shorter than that (as _common.lua's passage_blob_get reads them on one server).
--
-- ARGV[1] part size   ARGV[2] step between a blob's fields (keys.PASSAGE_GROUP)   ARGV[3..] key, first
--   field, key, first field, ...
-- Returns the blobs in order ('' where absent)

local size, step = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 2 do
  local key, first = ARGV[i], tonumber(ARGV[i + 1])
  local part = redis.call('HGET', key, ARGV[i + 1])
  local parts = {part or ''}
  while part and #part == size do
    part = redis.call('HGET', key, string.format('%d', first + step * #parts))
    parts[#parts + 1] = part or ''
  end
  out[#out + 1] = table.concat(parts)
end
return out
