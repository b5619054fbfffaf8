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
--   ARGV[18] the link step, '' for none: in 'insert' mode, for a collection with a site_field and format 2
--     or 3 estimate sketches (neardup's module version 6 or later: ND.MATCHLINK's protocol 3),
--     "<least estimate> <format> <fixed> <bins> <bits> <max links> <max partners> <max others>": after
--     the batch, each stored document of a site is verified against its candidates and its matches on
--     other sites linked here (one ND.MATCHLINK), not by a link.lua call after the check
--   ARGV[19 + 5*(i-1) ..] per document: id, record, expected stored ordinal ('' = unknown), its band keys,
--     its site ('' = none; only collections with a site_field send any: see _common.lua's sites)
--   ARGV[19 + 5*n] (optional) n + 1 uint32 LE offsets of the signatures in ARGV[15], when they differ in size
--   ARGV[19 + 5*n + i] (optional) document i's passage blob, indexed where the collection has passages on
--     (then ARGV[19 + 5*n] is sent, '' when the signatures are all of one size)
-- Returns one of
--   {'ok', {ordinal per doc (0 in read mode)}, {{candidate ordinals} per doc},
--    {ordinal, signature, record, ...} for candidates that are not documents of this batch,
--    this server's time in ms (records written by this call carry it as their insertion time),
--    1 when this call did the link step (ARGV[18]), else 0}
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
local link = nil
if mode == 'insert' and ARGV[18] ~= '' then
  local f = {}
  for w in string.gmatch(ARGV[18], '%S+') do f[#f + 1] = w end
  link = {least = f[1], format = f[2], fixed = f[3], bins = f[4], bits = f[5], links = f[6], partners = f[7],
    others = f[8]}
  if link.format == '3' then  -- the mode byte, then bins / 4 bytes
    link.size = tonumber(f[3]) + 1 + tonumber(f[4]) / 4
  else
    link.size = tonumber(f[3]) + tonumber(f[4]) * tonumber(f[5]) / 8
  end
end
-- ND.MATCHLINK, protocol 3 (module version 6): the batch's first ordinal, its sketches (ARGV[15]), which
-- documents to link ('1' each), then `cands`: every document's candidates as ND.BANDS gave them, then
-- the other candidates' sketches (one argument each, or one for all where that would be too many).
local function match_link(floor, cutoff, first, sketches, flags, cands)
  return redis.call('ND.MATCHLINK', '3', EDGES, SHARED, DOC, OW, EDGE_GROUP, DOC_GROUP, floor, cutoff,
    link.partners, link.others, link.links, link.least, link.format, link.fixed, link.bins, link.bits, first,
    sketches, flags, unpack(cands))
end
local function link_step_ready()  -- ND.MATCHLINK of no documents: writes nothing, answers {0, 0, 0}
  match_link('0', '-1', '0', '', '', {})
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
  -- The link step's command, asked before the first write (as band_step_ready): a server whose module
  -- is older than the scripts were chosen for fails here, with nothing written, not after the batch.
  if link then link_step_ready() end
  for i = 1, n do  -- and ND.BANDS's protocol 4, where it counts the pages (_site_page_module.lua)
    if SITE_PAGE_IN_BANDS and arg(i, 4) ~= '' then
      site_page_ready(st)
      break
    end
  end
  for i = 1, st.pas.on and n or 0 do
    local problem = passage_problem(st, ARGV[19 + 5 * n + i])
    if problem then return redis.error_reply(problem) end
  end
end

local now = server_ms()
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
        page = {KEYS[1], SITE_NAMES, SITE_IDS, SITE_PAGES, edge_key(ord), slot(ord, EDGE_GROUP), site}
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

-- The state first: the link step writes only site keys, and whatever it answers, the batch is stored.
if writes then save_state(st) end

-- The link step (ARGV[18]), after the whole batch as a link.lua call would run: one ND.MATCHLINK with
-- the batch's sketches, every document's candidates and the fetched ones' sketches. What is live is what
-- a link.lua call would see now: above the eviction floor after this batch, and not expired by this
-- call's clock.
local linked = 0
if link and sig_offsets == nil and sig_bytes == link.size then
  linked = 1
  local cutoff = -1
  if st.ttl > 0 then cutoff = tonumber(now) - st.ttl end
  local flags, cands, any = {}, {}, false
  for i = 1, n do
    flags[i] = '0'
    -- the band step's own blob (the module's: a server without it has no ND.MATCHLINK either)
    cands[i] = blobs[i] or ''
    if arg(i, 4) ~= '' and #candidates[i] > 0 then
      flags[i] = '1'
      any = true
    end
  end
  if any then
    local none
    for k = 2, #fetched, 3 do
      local sig = fetched[k]
      if #sig ~= link.size then
        none = none or string.rep('\0', link.size)
        sig = none
      end
      cands[#cands + 1] = sig
    end
    if #cands > 4000 then  -- unpack's limit is 8000 values: the fetched sketches as one argument
      cands = {unpack(cands, 1, n)}
      local sigs = {}
      for k = 2, #fetched, 3 do sigs[#sigs + 1] = #fetched[k] == link.size and fetched[k] or none end
      cands[n + 1] = table.concat(sigs)
    end
    match_link(string.format('%d', math.max(floor_of(st), 0)), string.format('%d', cutoff),
      string.format('%d', ordinals[1]), sig_blob, table.concat(flags), cands)
  end
end

return {'ok', ordinals, candidates, fetched, now, linked}
