-- passage_sources.lua: read-only; the passage blobs and records of stored documents a passage search
-- chose (docs/design.md, "Passages"): at most the search's MAX_SOURCES.
--
-- KEYS[1]  collection state hash
-- ARGV[1..9] shared head (see _common.lua), then ARGV[10] ordinals (OW bytes each, big-endian)
-- Returns {'ok', {ordinal, passage blob, record, ...} in the order asked ('' where gone), this
--   server's time in ms} or {'nocollection'} / {'stale'}

local st, status = load_state()
if not st then return {status} end
local wanted, out = ARGV[10], {}
for q = 1, #wanted - OW + 1, OW do
  local ord = struct.unpack(OW_FORMAT, wanted, q)
  out[#out + 1] = ord
  out[#out + 1] = passage_blob_get(ord) or ''
  out[#out + 1] = redis.call('HGET', doc_key(ord), slot(ord, DOC_GROUP)) or ''
end
return {'ok', out, server_ms()}
