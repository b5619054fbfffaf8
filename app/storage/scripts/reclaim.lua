-- reclaim.lua: remove expired or evicted documents (band entries, signature, record, id), given the
-- band keys the caller computed from their signatures (see due.lua); then move the watermark `low`
-- over every reclaimed ordinal and hole.
--
-- KEYS[1]  collection state hash
-- ARGV[1..9] shared head (see _common.lua), then ARGV[10 + 2*(j-1)] ordinal, ARGV[11 + 2*(j-1)] its
--   band keys (8 raw bytes each)
-- Returns {'ok', number removed} or {'nocollection'} / {'stale'}

local st, status = load_state()
if not st then return {status} end

local removed = 0
for j = 10, #ARGV, 2 do
  local ord = tonumber(ARGV[j])
  local record = redis.call('HGET', doc_key(ord), slot(ord, DOC_GROUP))
  if record then
    local id = record_id(record)
    remove_document(st, ord, ARGV[j + 1])
    local id_key = group_of(st.id, id_hash(id))
    if redis.call('HGET', id_key, id) == string.format('%d', ord) then
      redis.call('HDEL', id_key, id)
      st.id.N = st.id.N - 1
    end
    removed = removed + 1
  end
end
local steps = 0
while st.low < st.seq and steps < 1000 do
  local o = st.low + 1
  if redis.call('HEXISTS', doc_key(o), slot(o, DOC_GROUP)) == 1 then break end
  st.low = o
  steps = steps + 1
end
save_state(st)
return {'ok', removed}
