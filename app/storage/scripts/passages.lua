-- passages.lua: read-only; the stored documents that share fingerprints with a text, best first, with
-- their passage blobs and records (docs/design.md, "Passages").
--
-- KEYS[1]  collection state hash
-- ARGV[1..9] shared head (see _common.lua), then ARGV[10] the text's distinct fingerprint keys (raw,
--   4 bytes each: PASSAGE_KEY), ARGV[11] most documents to return
-- A document scores sum over the keys it shares of 1 / (documents in that key's posting): a key in
-- every template page counts little, a rare one fully. Documents evicted by max_documents are left
-- out (expiry by time is the caller's check, with the returned time).
-- Returns {'ok', {ordinal, passage blob, record, ...} best first, this server's time in ms} or
--   {'nocollection'} / {'stale'}

local st, status = load_state()
if not st then return {status} end
local wanted, limit = ARGV[10], tonumber(ARGV[11])
local out = {}
if not st.pas.on then return {'ok', out, server_ms()} end
local floor = floor_of(st)
local score, order = {}, {}
read_postings(st, wanted, function(key, value, first, stop, stride, size)
  local weight = 1 / size
  for p = first, stop, stride do
    local ord = struct.unpack(OW_FORMAT, value, p)
    if ord > floor then
      local s = score[ord]
      if not s then
        order[#order + 1] = ord
        s = 0
      end
      score[ord] = s + weight
    end
  end
end)
table.sort(order, function(a, b)
  if score[a] ~= score[b] then return score[a] > score[b] end
  return a < b
end)
for j = 1, math.min(limit, #order) do
  local ord = order[j]
  out[#out + 1] = ord
  out[#out + 1] = passage_blob_get(ord) or ''
  out[#out + 1] = redis.call('HGET', doc_key(ord), slot(ord, DOC_GROUP)) or ''
end
return {'ok', out, server_ms()}
