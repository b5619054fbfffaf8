-- lookup.lua: the stored version of some ids (for fetching, deleting and replacing documents).
--
-- KEYS[1]  collection state hash
-- ARGV[1..9] shared head (see _common.lua), then ARGV[10..] the ids
-- Returns {'ok', {ordinal (0 if absent), signature, record, ...} per id} or {'nocollection'} / {'stale'}
-- (a version evicted by max_documents counts as absent)

local st, status = load_state()
if not st then return {status} end

local out = {}
for k = 10, #ARGV do
  local id = ARGV[k]
  local cur = redis.call('HGET', group_of(st.id, id_hash(id)), id)
  if cur and tonumber(cur) > floor_of(st) then
    local ord = tonumber(cur)
    out[#out + 1] = ord
    out[#out + 1] = redis.call('HGET', sig_key(ord), slot(ord, SIG_GROUP)) or ''
    out[#out + 1] = redis.call('HGET', doc_key(ord), slot(ord, DOC_GROUP)) or ''
  else
    out[#out + 1] = 0
    out[#out + 1] = ''
    out[#out + 1] = ''
  end
end
return {'ok', out}
