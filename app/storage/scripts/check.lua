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

-- Document i's arguments: k = 0 id, 1 record, 2 expected stored ordinal, 3 band keys of the stored
-- version, 4 site.
local function doc_arg(i, k) return ARGV[19 + 5 * (i - 1) + k] end

-- The settle (ARGV[18]), or nil: parsed with the batch, run after every check that can refuse it.
local function read_settle(mode)
  if mode ~= 'insert' then return nil end
  return parse_settle(ARGV[18])
end

-- The batch: its arguments (ARGV[10..18]), and what the steps below gather in it.
--   hashes[id]: the id's group hash (a sha1: computed once); current[id]: the ordinal the id names,
--   false if none, kept up to date through the batch (one HGET per id, not two);
--   index[ord]: the batch position of a document this call stored; seen[ord]: a candidate fetched;
--   ordinals, candidates, blobs (the band step's candidates as bytes, where it gives them) per document;
--   fetched: the reply's {ordinal, signature, record, ...}.
local function read_batch()
  local n = tonumber(ARGV[11])
  local batch = {
    mode = ARGV[10], n = n, bands = tonumber(ARGV[12]), max_candidates = tonumber(ARGV[13]),
    band_blob = ARGV[14], sig_blob = ARGV[15], empties = ARGV[16], bucket_cap = tonumber(ARGV[17]),
    sig_bytes = #ARGV[15] / math.max(n, 1), sig_offsets = ARGV[19 + 5 * n],
    hashes = {}, current = {}, index = {}, seen = {},
    ordinals = {}, candidates = {}, blobs = {}, fetched = {},
  }
  if batch.sig_offsets == '' then batch.sig_offsets = nil end
  batch.writes = batch.mode ~= 'read'
  batch.settle = read_settle(batch.mode)
  return batch
end

local function sig_of(batch, i)
  if batch.sig_offsets then
    local from = struct.unpack('<I4', batch.sig_offsets, 4 * (i - 1) + 1)
    local to = struct.unpack('<I4', batch.sig_offsets, 4 * i + 1)
    return string.sub(batch.sig_blob, from + 1, to)
  end
  return string.sub(batch.sig_blob, (i - 1) * batch.sig_bytes + 1, i * batch.sig_bytes)
end

local function bands_of(batch, i)
  if string.sub(batch.empties, i, i) == '1' then return '' end
  return string.sub(batch.band_blob, (i - 1) * batch.bands * 8 + 1, i * batch.bands * 8)
end

local function passage_arg(batch, i) return ARGV[19 + 5 * batch.n + i] end

-- Read the id table for each distinct id (batch.hashes, batch.current). Returns {i, ordinal,
-- signature, ...} for the stored versions to remove whose band keys the client did not send (its
-- expected ordinal for the id is '' or another one).
local function find_stored_versions(st, batch)
  local missing = {}
  for i = 1, batch.n do
    local id = doc_arg(i, 0)
    if batch.current[id] == nil then
      batch.hashes[id] = id_hash(id)
      local cur = redis.call('HGET', group_of(st.id, batch.hashes[id]), id)
      batch.current[id] = cur and tonumber(cur) or false
      if cur and cur ~= doc_arg(i, 2) then
        local ord = tonumber(cur)
        missing[#missing + 1] = i
        missing[#missing + 1] = ord
        missing[#missing + 1] = redis.call('HGET', sig_key(ord), slot(ord, SIG_GROUP)) or ''
      end
    end
  end
  return missing
end

-- Every check that can refuse a batch with writes, all before its first write: the reply that refuses
-- it, or nil.
local function refusal_before_writes(st, batch)
  band_step_ready(st)
  if st.seq + batch.n > MAX_ORDINAL then
    return redis.error_reply(string.format('ordinals of this collection exhausted (last %d)', MAX_ORDINAL))
  end
  local sites = {}
  for i = 1, batch.n do sites[i] = doc_arg(i, 4) end
  local no_site_id = site_ids_refusal(sites)
  if no_site_id then return no_site_id end
  -- Every stored version we must remove has to come with its band keys.
  local missing = find_stored_versions(st, batch)
  if #missing > 0 then return {'replace', missing} end
  for i = 1, st.pas.on and batch.n or 0 do
    local problem = passage_problem(passage_arg(batch, i))
    if problem then return redis.error_reply(problem) end
  end
  return nil
end

-- Earlier batches' verified cross-site matches, linked as link.lua would (what is live is what it
-- would see now), and their journal fields gone with them.
local function settle_earlier_matches(st, settle, now)
  local cutoff = -1
  if st.ttl > 0 then cutoff = tonumber(now) - st.ttl end
  if #settle.pairs > 0 then link_step(st, floor_of(st), cutoff, settle.partners, settle.others, settle.pairs) end
  if #settle.fields > 0 then redis.call('HDEL', LINK_JOURNAL, unpack(settle.fields)) end
end

-- Point document i's id at ord, removing the version the id named (with its band keys from the batch
-- when that version is earlier in this batch, else those the client sent).
local function replace_stored_version(st, batch, i, id, ord)
  local id_key = group_of(st.id, batch.hashes[id])
  local cur = batch.current[id]
  batch.current[id] = ord
  if cur then
    local earlier = batch.index[cur]
    remove_document(st, cur, earlier and bands_of(batch, earlier) or doc_arg(i, 3))
  else
    st.id.N = st.id.N + 1
  end
  redis.call('HSET', id_key, id, string.format('%d', ord))
end

-- Count a stored document's page of its site ('' = none): returns the page for the band step's
-- command where that counts it (_site_page_module.lua), else counts it here and returns nil.
local function count_site_page(ord, site)
  if site == '' then return nil end
  if SITE_PAGE_IN_BANDS then return {KEYS[1], SITE_BASE, EDGE_GROUP, site} end
  add_site_page(ord, site)
  return nil
end

-- Stamp and store document i: its ordinal (seq + 1: ordinals are the first-seen stamps), the id
-- pointed at it, its signature, its record (its insertion time `now`), its page of a site and its
-- passages. Returns the ordinal, the ordinal as OW bytes, and the page for the band step (or nil).
local function store_document(st, batch, i, now)
  st.seq = st.seq + 1
  local ord = st.seq
  local o4 = ordinal_bytes(ord)
  replace_stored_version(st, batch, i, doc_arg(i, 0), ord)
  redis.call('HSET', sig_key(ord), slot(ord, SIG_GROUP), sig_of(batch, i))
  redis.call('HSET', doc_key(ord), slot(ord, DOC_GROUP), restamp(doc_arg(i, 1), now))
  local page = count_site_page(ord, doc_arg(i, 4))
  local blob = passage_arg(batch, i)
  if st.pas.on and blob and #blob >= 9 then passage_put(st, ord, o4, blob) end
  st.docs = st.docs + 1
  batch.index[ord] = i
  return ord, o4, page
end

-- The band step of document i: append its ordinal o4 (nil in read mode) to its buckets and read the
-- candidates already there, above the eviction floor; at most max_candidates: those that share the
-- most of this document's buckets (a near-duplicate shares most of them, a crowd of template pages
-- one or two), then the earliest (ordinals are stamps here), so a crowd cannot push a real
-- near-duplicate out of the verified ones. Each candidate that is not a document of this batch is
-- fetched once (its signature and record).
local function append_and_read(st, batch, i, o4, page)
  local found, blob = band_step(st, bands_of(batch, i), o4, batch.mode, batch.bucket_cap, floor_of(st),
    batch.max_candidates, page)
  batch.blobs[i] = blob
  local fetched = batch.fetched
  for _, c in ipairs(found) do
    if not batch.index[c] and not batch.seen[c] then
      batch.seen[c] = true
      fetched[#fetched + 1] = c
      fetched[#fetched + 1] = redis.call('HGET', sig_key(c), slot(c, SIG_GROUP)) or ''
      fetched[#fetched + 1] = redis.call('HGET', doc_key(c), slot(c, DOC_GROUP)) or ''
    end
  end
  batch.candidates[i] = found
end

-- The link journal (a collection with a site_field, insert mode): this batch's documents of a site
-- that have candidates, each with its candidates (OW bytes each, as the band step gave them), under
-- the batch's first ordinal. The service verifies them anyway for its answer; it settles the entry
-- (links the cross-site matches and deletes the field) with a later check or link.lua call, and a
-- site read settles whatever is left (a service that died first), so no verified match is lost and
-- the server never verifies twice. Returns the field written, else 0.
local function write_journal(batch)
  local parts = {}
  for i = 1, batch.n do
    local found = batch.candidates[i]
    if doc_arg(i, 4) ~= '' and #found > 0 then
      local c = batch.blobs[i]
      if not c then
        local t = {}
        for k, o in ipairs(found) do t[k] = ordinal_bytes(o) end
        c = table.concat(t)
      end
      parts[#parts + 1] = ordinal_bytes(batch.ordinals[i]) .. struct.pack('>I4', #found) .. c
    end
  end
  if #parts == 0 then return 0 end
  local journal = batch.ordinals[1]
  redis.call('HSET', LINK_JOURNAL, string.format('%d', journal), table.concat(parts))
  return journal
end

-- The protocol. Each document, in batch order, takes its stamp (its ordinal: ordinals are stamps
-- here) and is stored; then the band step appends it to its buckets and reads them in one go, so its
-- candidates are the documents appended before it (earlier batches, earlier documents of this one)
-- and the first seen wins.
local st, status = load_state()
if not st then return {status} end
local batch = read_batch()
if batch.writes then
  local refused = refusal_before_writes(st, batch)
  if refused then return refused end
end
local now = server_ms()
if batch.settle then settle_earlier_matches(st, batch.settle, now) end
for i = 1, batch.n do
  local ord, o4, page = 0, nil, nil
  if batch.writes then ord, o4, page = store_document(st, batch, i, now) end
  batch.ordinals[i] = ord
  append_and_read(st, batch, i, o4, page)
  -- Split after every document, not once per batch (band_step splits its table): a group that
  -- outgrows the listpack limits is converted to a hashtable, and the server never converts it back.
  if batch.writes then grow(st.id) end
end
if batch.writes then save_state(st) end
local journal = 0
if batch.mode == 'insert' then journal = write_journal(batch) end
return {'ok', batch.ordinals, batch.candidates, batch.fetched, now, journal}
