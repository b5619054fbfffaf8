-- delete.lua: remove one document everywhere (band entries, signature, record, id), if it is still
-- the version the client looked up (whose band keys it computed from the stored signature).
--
-- KEYS[1]  collection state hash
-- ARGV[1..9] shared head (see _common.lua), then ARGV[10] id, ARGV[11] expected ordinal,
--   ARGV[12] band keys of that version (8 raw bytes each; '' for an empty document)
-- Returns {'ok', 1} deleted, {'ok', 0} no such id, {'replace', ordinal, signature} the id now names
-- another version (look up again), {'nocollection'} / {'stale'}

local st, status = load_state()
if not st then return {status} end

local id = ARGV[10]
local id_key = group_of(st.id, id_hash(id))
local cur = redis.call('HGET', id_key, id)
if not cur then return {'ok', 0} end
if cur ~= ARGV[11] then
  local ord = tonumber(cur)
  return {'replace', ord, redis.call('HGET', sig_key(ord), slot(ord, SIG_GROUP)) or ''}
end
remove_document(st, tonumber(cur), ARGV[12])
redis.call('HDEL', id_key, id)
st.id.N = st.id.N - 1
save_state(st)
return {'ok', 1}
