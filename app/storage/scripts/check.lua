-- check.lua: one batch of documents, atomically: replace old versions, append to band buckets, stamp,
-- and read the candidates seen in those buckets (the append -> stamp -> read protocol of
-- docs/design.md ("Standalone: one script per batch") in one step, so first seen wins without any lock).
--
-- KEYS[1]  collection state hash
-- ARGV[1..9] shared head (see _common.lua), then:
--   ARGV[10] mode: 'insert' (store and report candidates), 'put' (store only), 'read' (no writes)
--   ARGV[11] n documents   ARGV[12] bands per document   ARGV[13] max candidates per document
--   ARGV[14] band keys: n * bands * 8 raw bytes        ARGV[15] signatures: n equal-sized raw blobs
--   ARGV[16] n characters, '1' where the document is empty (no band entries, never matches)
--   ARGV[17] most ordinals a bucket keeps (keys.BUCKET_CAP): a full bucket takes no more appends
--   ARGV[18] the settle, '' for none (insert mode only): "<max partners> <max others> <journal field> ...",
--     a newline, then pairs (per pair the checked document's ordinal and its match's, 8 bytes big-endian
--     each): the cross-site matches the service verified for earlier batches of this collection, linked
--     first (link.lua's step) and their journal fields deleted, in this script (docs/design.md "Sites")
--   ARGV[19 + 5*(i-1) ..] per document: id, record, expected stored ordinal ('' = unknown), its band keys,
--     its site ('' = none; only collections with a site_field send any: see _common.lua's sites)
--   ARGV[19 + 5*n] (optional) n + 1 uint32 LE offsets of the signatures in ARGV[15], when they differ in size
--   ARGV[19 + 5*n + i] (optional) document i's passage blob, indexed where the collection has passages on
--     (then ARGV[19 + 5*n] is sent, '' when the signatures are all of one size)
-- Returns one of
--   {'ok', {ordinal per doc (0 in read mode)}, {{candidate ordinals} per doc},
--    {ordinal, signature, record, ...} for candidates that are not documents of this batch,
--    this server's time in ms (records written by this call carry it as their insertion time),
--    the link journal field this call wrote (its first ordinal: its documents of a site with
--    candidates, each with its candidates, for the service to settle), else 0}
--   (candidates evicted by max_documents are left out; expiry by time is the caller's check)
--   {'replace', {i, ordinal, signature, ...}}: these ids exist and the client did not send the band keys
--     of the stored version (needed to remove it): nothing was written, call again with them
--   {'nocollection'} / {'stale'} (the collection was dropped / recreated)

local st, status = load_state()
if not st then return {status} end

local mode = ARGV[10]
local n, bands, max_candidates = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
local band_blob, sig_blob, empties = ARGV[14], ARGV[15], ARGV[16]
local bucket_cap = tonumber(ARGV[17])
local sig_bytes = #sig_blob / math.max(n, 1)
local sig_offsets = ARGV[19 + 5 * n]
if sig_offsets == '' then sig_offsets = nil end
local function sig_of(i)
  if sig_offsets then
    local from = struct.unpack('<I4', sig_offsets, 4 * (i - 1) + 1)
    local to = struct.unpack('<I4', sig_offsets, 4 * i + 1)
    return string.sub(sig_blob, from + 1, to)
  end
  return string.sub(sig_blob, (i - 1) * sig_bytes + 1, i * sig_bytes)
end
local writes = mode ~= 'read'
-- The settle (ARGV[18]): parsed here, run after every check that can refuse the batch.
local settle = nil
if mode == 'insert' and ARGV[18] ~= '' then
  local nl = string.find(ARGV[18], '\n', 1, true)
  local f = {}
  for w in string.gmatch(string.sub(ARGV[18], 1, nl - 1), '%S+') do f[#f + 1] = w end
  settle = {partners = tonumber(f[1]), others = tonumber(f[2]), fields = {unpack(f, 3)},
    pairs = string.sub(ARGV[18], nl + 1)}
end

local function arg(i, k) return ARGV[19 + 5 * (i - 1) + k] end
local function bands_of(i)
  if string.sub(empties, i, i) == '1' then return '' end
  return string.sub(band_blob, (i - 1) * bands * 8 + 1, i * bands * 8)
end

-- hashes[id]: the id's group hash (a sha1: computed once); current[id]: the ordinal the id names,
-- false if none, kept up to date through the batch (one HGET per id, not two).
local hashes, current = {}, {}
if writes then
  band_step_ready(st)
  if st.seq + n > MAX_ORDINAL then
    return redis.error_reply(string.format('ordinals of this collection exhausted (last %d)', MAX_ORDINAL))
  end
  -- Before any write: every stored version we must remove has to come with its band keys.
  local missing = {}
  for i = 1, n do
    local id = arg(i, 0)
    if current[id] == nil then
      hashes[id] = id_hash(id)
      local cur = redis.call('HGET', group_of(st.id, hashes[id]), id)
      current[id] = cur and tonumber(cur) or false
      if cur and cur ~= arg(i, 2) then
        local ord = tonumber(cur)
        missing[#missing + 1] = i
        missing[#missing + 1] = ord
        missing[#missing + 1] = redis.call('HGET', sig_key(ord), slot(ord, SIG_GROUP)) or ''
      end
    end
  end
  if #missing > 0 then return {'replace', missing} end
  for i = 1, st.pas.on and n or 0 do
    local problem = passage_problem(ARGV[19 + 5 * n + i])
    if problem then return redis.error_reply(problem) end
  end
end

local now = server_ms()
-- The settle first: earlier batches' verified cross-site matches, linked as link.lua would (what is
-- live is what it would see now), and their journal fields gone with them.
if settle then
  local cutoff = -1
  if st.ttl > 0 then cutoff = tonumber(now) - st.ttl end
  if #settle.pairs > 0 then link_step(st, floor_of(st), cutoff, settle.partners, settle.others, settle.pairs) end
  if #settle.fields > 0 then redis.call('HDEL', LINK_JOURNAL, unpack(settle.fields)) end
end
local ordinals, candidates, fetched = {}, {}, {}
local batch_index, seen_fetched, blobs = {}, {}, {}
for i = 1, n do
  local ord = 0
  local o4, page
  if writes then
    local id = arg(i, 0)
    st.seq = st.seq + 1
    ord = st.seq
    o4 = ordinal_bytes(ord)
    local id_key = group_of(st.id, hashes[id])
    local cur = current[id]
    current[id] = ord
    if cur then
      local earlier = batch_index[cur]
      remove_document(st, cur, earlier and bands_of(earlier) or arg(i, 3))
    else
      st.id.N = st.id.N + 1
    end
    redis.call('HSET', id_key, id, string.format('%d', ord))
    redis.call('HSET', sig_key(ord), slot(ord, SIG_GROUP),
      sig_of(i))
    redis.call('HSET', doc_key(ord), slot(ord, DOC_GROUP), restamp(arg(i, 1), now))
    local site = arg(i, 4)
    if site ~= '' then
      if SITE_PAGE_IN_BANDS then  -- counted by the band step's command (_site_page_module.lua)
        page = {KEYS[1], SITE_BASE, EDGE_GROUP, site}
      else
        add_site_page(ord, site)
      end
    end
    local blob = ARGV[19 + 5 * n + i]
    if st.pas.on and blob and #blob >= 9 then passage_put(st, ord, o4, blob) end
    st.docs = st.docs + 1
    batch_index[ord] = i
  end
  ordinals[i] = ord

  -- The candidates above the eviction floor; at most max_candidates: those that share the most of
  -- this document's buckets (a near-duplicate shares most of them, a crowd of template pages one or
  -- two), then the earliest (ordinals are stamps here), so a crowd cannot push a real near-duplicate
  -- out of the verified ones.
  local found, blob = band_step(st, bands_of(i), o4, mode, bucket_cap, floor_of(st), max_candidates, page)
  blobs[i] = blob
  for _, c in ipairs(found) do
    if not batch_index[c] and not seen_fetched[c] then
      seen_fetched[c] = true
      fetched[#fetched + 1] = c
      fetched[#fetched + 1] = redis.call('HGET', sig_key(c), slot(c, SIG_GROUP)) or ''
      fetched[#fetched + 1] = redis.call('HGET', doc_key(c), slot(c, DOC_GROUP)) or ''
    end
  end
  candidates[i] = found
  -- Split after every document, not once per batch (band_step splits its table): a group that
  -- outgrows the listpack limits is converted to a hashtable, and the server never converts it back.
  if writes then grow(st.id) end
end

if writes then save_state(st) end

-- The link journal (a collection with a site_field, insert mode): this batch's documents of a site
-- that have candidates, each with its candidates (OW bytes each, as the band step gave them), under
-- the batch's first ordinal. The service verifies them anyway for its answer; it settles the entry
-- (links the cross-site matches and deletes the field) with a later check or link.lua call, and a
-- site read settles whatever is left (a service that died first), so no verified match is lost and
-- the server never verifies twice.
local journal = 0
if mode == 'insert' then
  local parts = {}
  for i = 1, n do
    if arg(i, 4) ~= '' and #candidates[i] > 0 then
      local c = blobs[i]
      if not c then
        local t = {}
        for k, o in ipairs(candidates[i]) do t[k] = ordinal_bytes(o) end
        c = table.concat(t)
      end
      parts[#parts + 1] = ordinal_bytes(ordinals[i]) .. struct.pack('>I4', #candidates[i]) .. c
    end
  end
  if #parts > 0 then
    journal = ordinals[1]
    redis.call('HSET', LINK_JOURNAL, string.format('%d', journal), table.concat(parts))
  end
end

return {'ok', ordinals, candidates, fetched, now, journal}
