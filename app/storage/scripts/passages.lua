-- passages.lua: read-only; the stored documents that share fingerprints with a text, best first, with
-- their passage blobs and records (docs/design.md, "Passages").
--
-- KEYS[1]  collection state hash
-- ARGV[1..9] shared head (see _common.lua), then ARGV[10] the text's distinct fingerprint keys (8 raw
--   bytes each), ARGV[11] most documents to return
-- The band step reads the index (the same layout as the band table): the documents found in the most of
-- the keys' postings, then the earliest. Documents evicted by max_documents are left out (expiry by time
-- is the caller's check, with the returned time).
-- Returns {'ok', {ordinal, passage blob, record, ...} best first, this server's time in ms}
--   or {'nocollection'} / {'stale'}

local st, status = load_state()
if not st then return {status} end
local wanted, limit = ARGV[10], tonumber(ARGV[11])
local out = {}
if not st.pas.on then return {'ok', out, server_ms()} end
local order = band_step({band = st.pas}, wanted, nil, 'read', POSTING_CAP, floor_of(st), limit)
for j = 1, math.min(limit, #order) do
  local ord = order[j]
  out[#out + 1] = ord
  out[#out + 1] = redis.call('HGET', passage_blob_key(ord), slot(ord, PASSAGE_GROUP)) or ''
  out[#out + 1] = redis.call('HGET', doc_key(ord), slot(ord, DOC_GROUP)) or ''
end
return {'ok', out, server_ms()}
