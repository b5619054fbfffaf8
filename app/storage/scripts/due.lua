-- due.lua: the oldest documents that expired (retention) or were evicted (max_documents), in ordinal
-- order from the reclaimed watermark `low`, with their signatures (the caller computes their band
-- keys and sends them to reclaim.lua). Skips holes (deleted or replaced ordinals) and moves `low`
-- over them. Bounded work per call: no keyspace scan. The walk stops at the first live document:
-- insertion times grow with ordinals, because records are stamped with the collection's clock,
-- which never goes back (_clock.lua); expiry is judged by that clock too, and the reading is kept,
-- so what this call found expired stays expired for every later call.
--
-- KEYS[1]  collection state hash
-- ARGV[1..9] shared head (see _common.lua), then ARGV[10] unused (expiry is judged by the
-- collection's clock, read here), ARGV[11] most documents to return
-- Returns {'ok', {ordinal, signature, ...}} or {'nocollection'} / {'stale'}

local st, status = load_state()
if not st then return {status} end

local now, limit = tonumber(server_ms()), tonumber(ARGV[11])
local floor = floor_of(st)
local cutoff = st.ttl > 0 and now - st.ttl or -1
local out = {}
local ord = st.low
local steps = 0
while ord < st.seq and #out < 2 * limit and steps < 8 * limit do
  local next_ord = ord + 1
  steps = steps + 1
  local record = redis.call('HGET', doc_key(next_ord), slot(next_ord, DOC_GROUP))
  if not record then
    if #out == 0 then st.low = next_ord end  -- a hole before anything due: reclaimed already
  else
    if next_ord <= floor or record_ms(record) < cutoff then
      out[#out + 1] = next_ord
      out[#out + 1] = redis.call('HGET', sig_key(next_ord), slot(next_ord, SIG_GROUP)) or ''
    else
      break
    end
  end
  ord = next_ord
end
redis.call('HSET', KEYS[1], 'low', st.low)
clock_save()
return {'ok', out}
