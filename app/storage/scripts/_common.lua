-- _common.lua: helpers shared by the collection scripts; the store prepends this file to each of them.
--
-- Shared ARGV head of check.lua, lookup.lua and delete.lua (built by store.py from keys.py):
--   ARGV[1] gen of the collection the client computed for   ARGV[2..5] band, id, sig, record prefixes
--   ARGV[6] band group target   ARGV[7] id group target   ARGV[8] ordinal width in bytes
--   (keys.ORDINAL_WIDTH)   ARGV[9] record group size
-- KEYS[1] is always the collection's state hash. The group keys are derived from the prefixes (so the
-- scripts touch undeclared keys: fine on a standalone server, which is the only place they run).

local GEN, BAND, IDS, SIG, DOC = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local BAND_TARGET, ID_TARGET = tonumber(ARGV[6]), tonumber(ARGV[7])
local DOC_GROUP = tonumber(ARGV[9])
-- Every stored ordinal (band values, postings, site entries) is OW bytes, big-endian.
local OW = tonumber(ARGV[8])
local OW_FORMAT, MAX_ORDINAL = '>I' .. OW, 2 ^ (8 * OW) - 1
-- Sketches per signature hash: the state's `sg`, fixed at creation (keys.sig_group_size), set by
-- load_state.
local SIG_GROUP = 0
-- Passages (keys.py: POSTING_CAP, PASSAGE_GROUP): the index and blob prefixes sit beside the band
-- prefix ("nd:c:g:b:" -> "nd:c:g:f:", "nd:c:g:p:").
local POSTING_CAP, PASSAGE_GROUP = 64, 120
local PASSAGE_INDEX = string.sub(BAND, 1, #BAND - 2) .. 'f:'
local PASSAGE_BLOBS = string.sub(BAND, 1, #BAND - 2) .. 'p:'

-- A document's record, as neardup/storage/records.py defines it: "<inserted_ms>:<id length>:<id><metadata>".
local function record_ms(record)
  return tonumber(string.match(record, '^(%d+):')) or 0
end

-- The same record with the insertion time `ms` (the collection's clock, see server_ms below).
local function restamp(record, ms)
  return ms .. string.sub(record, #string.match(record, '^%d+') + 1)
end

-- The collection's clock (_clock.lua: this server's TIME, kept from going back) in Unix ms, as a
-- decimal string: the one clock the protocol compares (records' insertion times, retention), whatever
-- the clocks of the service processes. save_state keeps the reading.
local function server_ms()
  return string.format('%d', clock_ms(KEYS[1]))
end

local function record_id(record)
  local head, size = string.match(record, '^(%d+:(%d+):)')
  if not head then return '' end
  return string.sub(record, #head + 1, #head + tonumber(size))
end

-- Band keys arrive as 8 raw little-endian bytes; their low 32 bits pick the group.
local function band_hash(field)
  local a, b, c, d = string.byte(field, 1, 4)
  return a + b * 256 + c * 65536 + d * 16777216
end

local function id_hash(id)
  return tonumber(string.sub(redis.sha1hex(id), 1, 8), 16)
end

-- Linear hashing: groups below the split pointer S already use one more bit. Key names are cached
-- per script call (a string.format per band and document was a tenth of the script's time).
local function group_of(t, h)
  local g = h % t.n
  if g < t.S then g = h % (2 * t.n) end
  local name = t.names[g]
  if not name then
    name = t.prefix .. string.format('%d', g)
    t.names[g] = name
  end
  return name
end

-- Linear hashing's split of group S (`src`) into S and S + n (`dst`) of a hash-grouped table.
local function split_hash(t, src, dst, n)
  local all = redis.call('HGETALL', src)
  local moved, fields = {}, {}
  for i = 1, #all, 2 do
    if t.hash(all[i]) % (2 * n) ~= t.S then
      moved[#moved + 1] = all[i]
      moved[#moved + 1] = all[i + 1]
      fields[#fields + 1] = all[i]
    end
  end
  if #fields > 0 then
    redis.call('HDEL', src, unpack(fields))
    redis.call('HSET', dst, unpack(moved))
  end
end

-- Split groups until the table is back under its target fields per group, at most MAX_SPLITS per
-- call. Each split rehashes one group (tens of fields), so the cost is spread evenly over the
-- insertions; the bound keeps a call short when a table is far over target (e.g. after the target
-- was lowered): such a table catches up a few splits per document. `t.split` is the table's split
-- (split_hash; the passage index: split_packed, which stops at level t.top).
local MAX_SPLITS = 4
local function grow(t)
  local splits = 0
  while t.N > t.target * (t.n + t.S) and splits < MAX_SPLITS and t.L < (t.top or 64) do
    splits = splits + 1
    local n = t.n
    t.split(t, t.prefix .. string.format('%d', t.S), t.prefix .. string.format('%d', t.S + n), n)
    t.S = t.S + 1
    if t.S == n then
      t.L = t.L + 1
      t.n = 2 * n
      t.S = 0
    end
  end
end

-- The passage index (keys.py; native/valkey/packed_index.hpp writes the same bytes): a group is one
-- string of records sorted by (key, ordinal), each the fingerprint key's bits 8..31 (3 bytes,
-- big-endian; its bits 0..7 are the group number's, the index starting with 2^8 groups) then an
-- ordinal (OW bytes, big-endian). A key's posting is its run of records; N counts records.
local PASSAGE_TARGET, PASSAGE_LEVEL = 128, 8
-- Its last level (2^23 groups). It was set by the blob once stored with 24-bit keys, whose groups
-- removal had to name from those bits; blobs now keep the whole 32-bit key, and a record keeps bits
-- 8..31 (its group the rest), so the index could split on to level 32 as far as the layout goes. Kept
-- at 23 (~1 billion records at PASSAGE_TARGET a group) until a larger index is measured.
local PASSAGE_TOP = 23

-- The record key of a fingerprint key (4 raw little-endian bytes): its bits 8..31, big-endian.
local function record_key(key) return string.reverse(string.sub(key, 2, 4)) end
local function record_bits(v, p)
  local a, b, c = string.byte(v, p, p + 2)
  return (a * 256 + b) * 256 + c
end

-- Records first .. last - 1 (counted from 0) of group value v hold the key whose record key is `rk`.
local function posting_range(v, rk)
  local rw, k = 3 + OW, record_bits(rk, 1)
  local lo, hi = 0, #v / (3 + OW)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if record_bits(v, mid * rw + 1) < k then lo = mid + 1 else hi = mid end
  end
  local last, count = lo, #v / rw
  while last < count and record_bits(v, last * rw + 1) == k do last = last + 1 end
  return lo, last
end

local function set_or_del(key, value)
  if #value > 0 then redis.call('SET', key, value) else redis.call('DEL', key) end
end

-- split_hash's twin for the packed index: records stay in order on both sides.
local function split_packed(t, src, dst, n)
  local v = redis.call('GET', src)
  if not v then return end
  local rw, low = 3 + OW, t.S % 256
  local stay, move = {}, {}
  for p = 1, #v, rw do
    local record = string.sub(v, p, p + rw - 1)
    local side = (record_bits(v, p) * 256 + low) % (2 * n) == t.S and stay or move
    side[#side + 1] = record
  end
  if #move > 0 then
    set_or_del(src, table.concat(stay))
    redis.call('SET', dst, table.concat(move))
  end
end

-- Returns the state table, or nil and the status to return ('nocollection' or 'stale').
local function load_state()
  local v = redis.call('HMGET', KEYS[1], 'gen', 'seq', 'docs', 'bL', 'bS', 'bN', 'iL', 'iS', 'iN',
    'ttl', 'maxd', 'low', 'pL', 'pS', 'pN', 'sg')
  if not v[1] then return nil, 'nocollection' end
  if v[1] ~= GEN then return nil, 'stale' end
  SIG_GROUP = tonumber(v[16])
  local st = {
    seq = tonumber(v[2]), docs = tonumber(v[3]),
    ttl = tonumber(v[10]) or 0, maxd = tonumber(v[11]) or 0, low = tonumber(v[12]) or 0,
    band = {prefix = BAND, L = tonumber(v[4]), n = 2 ^ tonumber(v[4]), S = tonumber(v[5]),
            N = tonumber(v[6]), target = BAND_TARGET, hash = band_hash, names = {}, split = split_hash},
    id = {prefix = IDS, L = tonumber(v[7]), n = 2 ^ tonumber(v[7]), S = tonumber(v[8]),
          N = tonumber(v[9]), target = ID_TARGET, hash = id_hash, names = {}, split = split_hash},
    -- the passage index (keys.py): only in collections created with passages on (pL set at creation)
    pas = {prefix = PASSAGE_INDEX, L = tonumber(v[13]) or 0, n = 2 ^ (tonumber(v[13]) or 0),
           S = tonumber(v[14]) or 0, N = tonumber(v[15]) or 0, target = PASSAGE_TARGET, names = {},
           on = v[13] ~= false, split = split_packed, top = PASSAGE_TOP},
  }
  return st
end

-- Ordinals at or below this one are evicted by max_documents (they stop matching at once; the
-- reclaimer removes their entries later).
local function floor_of(st)
  if st.maxd > 0 then return st.seq - st.maxd end
  return 0
end

local function save_state(st)
  redis.call('HSET', KEYS[1], 'seq', string.format('%d', st.seq), 'docs', st.docs,
    'low', string.format('%d', st.low),
    'bL', st.band.L, 'bS', st.band.S, 'bN', st.band.N, 'iL', st.id.L, 'iS', st.id.S, 'iN', st.id.N)
  if st.pas.on then redis.call('HSET', KEYS[1], 'pL', st.pas.L, 'pS', st.pas.S, 'pN', st.pas.N) end
  clock_save()
end

local function sig_key(ord) return SIG .. string.format('%d', math.floor(ord / SIG_GROUP)) end
local function doc_key(ord) return DOC .. string.format('%d', math.floor(ord / DOC_GROUP)) end
local function slot(ord, size) return string.format('%d', ord % size) end

local function ordinal_bytes(ord) return struct.pack(OW_FORMAT, ord) end

-- Sites (collections with a site_field; docs/design.md "Sites"). The keys share the record prefix's
-- base (DOC is '<base>:d:'), so every script that has the head can reach them:
--   <base>:sn  site name -> site id      <base>:si  site id -> name      <base>:sp  site id -> pages
--   <base>:sf  the free site ids, a stack: field n (1 .. the state's `sfree`) -> the id forgotten n-th
--   <base>:x:<site id>  per other site, shared: pages of this site with a partner on the other. A
--     string of 8-byte records, the other site id then the count (4 bytes big-endian each), a new site
--     appended, a site whose count falls to 0 replaced by the last record (shared_add)
--   <base>:e:<ord / EDGE_GROUP>  ordinal -> its entry: site id (4 bytes), then per partner (a matched
--     document of another site) its ordinal (OW bytes) and site id (4 bytes). Edges are symmetric.
local SITE_BASE = string.sub(DOC, 1, #DOC - 2)
local SITE_NAMES, SITE_IDS, SITE_PAGES = SITE_BASE .. 'sn', SITE_BASE .. 'si', SITE_BASE .. 'sp'
local SITE_FREE = SITE_BASE .. 'sf'
local SHARED, EDGES = SITE_BASE .. 'x:', SITE_BASE .. 'e:'
-- <base>:lj  the link journal: a batch's first ordinal -> its documents of a site with candidates, each
--   its ordinal (OW bytes), the number of its candidates (4 bytes) and their ordinals (check.lua)
local LINK_JOURNAL = SITE_BASE .. 'lj'
-- In place of a document's count of candidates in a journal entry: not read yet (cluster_stamp.lua's
-- entry, which its check replaces once it has read them; keys.JOURNAL_UNREAD).
local JOURNAL_UNREAD = 4294967295
local EDGE_GROUP = 32

local function edge_key(ord) return EDGES .. string.format('%d', math.floor(ord / EDGE_GROUP)) end
local function shared_key(site) return SHARED .. site end

-- Site ids are 4 bytes in entries and shared counts: 1 .. MAX_SITE_ID (keys.MAX_SITE_ID). A new site
-- takes the id of the site forgotten last (the free stack), else the next of the state's `sseq`, so
-- `sseq` is the highest id ever issued and grows only with the sites held at once.
local MAX_SITE_ID = 4294967295
local SITE_IDS_EXHAUSTED = 'site ids of this collection exhausted (last 4294967295)'

-- The site id of a name, interned when new. Running out is refused before any write (site_ids_refusal),
-- so the error here is a guard that a wrapped id is never written.
local function site_id(name)
  local id = redis.call('HGET', SITE_NAMES, name)
  if id then return tonumber(id) end
  local v = redis.call('HMGET', KEYS[1], 'sseq', 'sfree')
  local free = tonumber(v[2]) or 0
  if free > 0 then
    local top = string.format('%d', free)
    id = tonumber(redis.call('HGET', SITE_FREE, top))
    if not id then error({err = 'ERR the free site ids are inconsistent'}) end
    redis.call('HDEL', SITE_FREE, top)
    redis.call('HSET', KEYS[1], 'sfree', string.format('%d', free - 1))
  else
    id = (tonumber(v[1]) or 0) + 1
    if id > MAX_SITE_ID then error({err = 'ERR ' .. SITE_IDS_EXHAUSTED}) end
    redis.call('HSET', KEYS[1], 'sseq', string.format('%d', id))
  end
  local text = string.format('%d', id)
  redis.call('HSET', SITE_NAMES, name, text)
  redis.call('HSET', SITE_IDS, text, name)
  return id
end

-- The refusal of a batch whose documents' sites (`sites`, '' = none) could need more new ids than are
-- left, nil otherwise: check.lua asks before its first write. A batch interns at most one id per name
-- the collection does not know yet (a name forgotten during the batch freed its own id first), so the
-- names are looked up only when fewer ids are left than the batch has documents.
local function site_ids_refusal(sites)
  local named = false
  for _, s in ipairs(sites) do named = named or s ~= '' end
  if not named then return nil end
  local v = redis.call('HMGET', KEYS[1], 'sseq', 'sfree')
  local left = MAX_SITE_ID - (tonumber(v[1]) or 0) + (tonumber(v[2]) or 0)
  if left >= #sites then return nil end
  local new, need = {}, 0
  for _, s in ipairs(sites) do
    if s ~= '' and not new[s] then
      new[s] = true
      if redis.call('HEXISTS', SITE_NAMES, s) == 0 then need = need + 1 end
    end
  end
  if need > left then return redis.error_reply(SITE_IDS_EXHAUSTED) end
  return nil
end

-- The record of site b (`b4`: its id, 4 bytes big-endian) in a's shared counts `s`: its position
-- (1-based), or nil.
local function shared_at(s, b4)
  local from = 1
  while true do
    local at = string.find(s, b4, from, true)
    if not at or at % 8 == 1 then return at end
    from = at + 1
  end
end

-- Adds d to shared(a, b); a new site b only while a has fewer than `room` other sites (nil: no
-- bound). Returns false when the bound refused it, else true.
local function shared_add(a, b, d, room)
  local key = shared_key(a)
  local s = redis.call('GET', key) or ''
  local at = shared_at(s, struct.pack('>I4', b))
  local n = d + (at and struct.unpack('>I4', s, at + 4) or 0)
  if n > 0 and at then
    redis.call('SETRANGE', key, at + 3, struct.pack('>I4', n))
  elseif n > 0 then
    if room and #s >= 8 * room then return false end
    redis.call('SET', key, s .. struct.pack('>I4>I4', b, n))  -- not APPEND: it doubles a string's room
  elseif at and #s == 8 then
    redis.call('DEL', key)
  elseif at then  -- the last record takes its place
    local last = #s - 7
    local rest = at == last and '' or string.sub(s, last) .. string.sub(s, at + 8, last - 1)
    redis.call('SET', key, string.sub(s, 1, at - 1) .. rest)
  end
  return true
end

-- A site whose last page goes is forgotten, and its id goes on the free stack for the next new site:
-- nothing names it any more. No entry: its pages are 0. No shared count: its own are gone with its
-- pages, and another site counts it only while it counts that site (edges are symmetric). Where its own
-- shared counts were still there (never, while the counts are exact), the id is not reused.
local function pages_add(a, d)
  if redis.call('HINCRBY', SITE_PAGES, a, d) <= 0 then
    redis.call('HDEL', SITE_PAGES, a)
    local name = redis.call('HGET', SITE_IDS, a)
    redis.call('HDEL', SITE_IDS, a)
    if name then redis.call('HDEL', SITE_NAMES, name) end
    if redis.call('DEL', shared_key(a)) == 0 and name then
      local n = redis.call('HINCRBY', KEYS[1], 'sfree', 1)
      redis.call('HSET', SITE_FREE, n, string.format('%d', a))
    end
  end
end

-- A new document of site `name` (ordinal ord): counted, with an entry and no partners yet.
local function add_site_page(ord, name)
  local a = site_id(name)
  pages_add(a, 1)
  redis.call('HSET', edge_key(ord), slot(ord, EDGE_GROUP), struct.pack('>I4', a))
end

-- The link journal's first entries (at most `limit`) whose field is at most `through`, as {field,
-- value, ...} (journal.lua, cluster_journal.lua).
local function journal_entries(limit, through)
  local entries = {}
  local cursor = '0'
  repeat
    local r = redis.call('HSCAN', LINK_JOURNAL, cursor, 'COUNT', 100)
    cursor = r[1]
    for i = 1, #r[2], 2 do
      if #entries < 2 * limit and tonumber(r[2][i]) <= through then
        entries[#entries + 1] = r[2][i]
        entries[#entries + 1] = r[2][i + 1]
      end
    end
  until cursor == '0' or #entries >= 2 * limit
  return entries
end

-- A settle as the service sends it (check.lua's ARGV[18], cluster_sites.lua's): "<max partners> <max
-- others> <journal field> ...", a newline, then the pairs (per pair two ordinals, 8 bytes big-endian
-- each); nil for ''.
local function parse_settle(text)
  if text == '' then return nil end
  local nl = string.find(text, '\n', 1, true)
  local f = {}
  for w in string.gmatch(string.sub(text, 1, nl - 1), '%S+') do f[#f + 1] = w end
  return {partners = tonumber(f[1]), others = tonumber(f[2]), fields = {unpack(f, 3)},
    pairs = string.sub(text, nl + 1)}
end

-- Whether entry v has a partner of site b; and the position of partner o4 (OW bytes) in it, or nil.
local function has_site(v, b)
  for q = 5 + OW, #v, OW + 4 do
    if struct.unpack('>I4', v, q) == b then return true end
  end
  return false
end
local function partner_at(v, o4)
  for q = 5, #v, OW + 4 do
    if string.sub(v, q, q + OW - 1) == o4 then return q end
  end
  return nil
end

-- Take a document's site contribution away: its page, every edge to its partners (and their `shared`
-- where it was their last partner on this site), its own `shared` per partner site.
local function remove_site_page(ord)
  local key, field = edge_key(ord), slot(ord, EDGE_GROUP)
  local v = redis.call('HGET', key, field)
  if not v then return end
  redis.call('HDEL', key, field)
  local a = struct.unpack('>I4', v, 1)
  local o4 = ordinal_bytes(ord)
  local counted = {}
  for q = 5, #v, OW + 4 do
    local p = struct.unpack(OW_FORMAT, v, q)
    local b = struct.unpack('>I4', v, q + OW)
    if not counted[b] then
      counted[b] = true
      shared_add(a, b, -1)
    end
    local pkey, pfield = edge_key(p), slot(p, EDGE_GROUP)
    local pv = redis.call('HGET', pkey, pfield)
    if pv then
      local at = partner_at(pv, o4)
      if at then
        pv = string.sub(pv, 1, at - 1) .. string.sub(pv, at + OW + 4)
        redis.call('HSET', pkey, pfield, pv)
        if not has_site(pv, a) then shared_add(b, a, -1) end
      end
    end
  end
  pages_add(a, -1)
end

-- Passages (docs/design.md, "Passages"; keys.py): a collection created with passages on keeps each
-- document's passage blob (fingerprints.py: byte 1 = PASSAGE_FORMAT, then the word count and the entry
-- count m as varints, then m fingerprint keys of PASSAGE_KEY raw bytes, then positions the scripts
-- never read), kept as sent, in p:<ord // 120>, in parts of PASSAGE_PART bytes, part j in the field
-- slot + 120 j, so that every part stays a listpack value;
-- and the passage index (above): per fingerprint key, the ordinals of the documents that hold it, at
-- most POSTING_CAP of them (a full posting takes no more: see the design document for what is lost).
-- check.lua's passage_put (_passages_lua.lua, or ND.PASSAGES where the server has neardup's module)
-- writes it and passages.lua reads it.
local PASSAGE_FORMAT, PASSAGE_KEY = 3, 4
local PASSAGE_PART = 600
local function passage_blob_key(ord) return PASSAGE_BLOBS .. string.format('%d', math.floor(ord / PASSAGE_GROUP)) end

-- An unsigned LEB128 varint of s at p: its value and the position past it (nil past the end).
local function varint(s, p)
  local value, scale = 0, 1
  for _ = 1, 5 do
    local b = string.byte(s, p)
    if not b then return nil, p end
    p = p + 1
    value = value + (b % 128) * scale
    if b < 128 then return value, p end
    scale = scale * 128
  end
  return nil, p
end

-- (m, position of the first key) of a blob at least 9 bytes long; m is nil when the header is cut short.
local function passage_head(blob)
  local _, p = varint(blob, 2)
  return varint(blob, p)
end

-- Why a blob cannot be stored (nil: it can; '' and short blobs are not stored).
local function passage_problem(blob)
  if not blob or #blob < 9 then return nil end
  local format = string.byte(blob, 1)
  if format ~= PASSAGE_FORMAT then return 'unknown passage blob format ' .. format end
  local m, at = passage_head(blob)
  if not m or #blob < at - 1 + PASSAGE_KEY * m then return 'truncated passage blob' end
  return nil
end

-- The distinct fingerprint keys of a passage blob (PASSAGE_KEY raw bytes each), in order, as a list.
local function passage_keys(blob)
  if not blob or #blob < 9 then return {} end
  local m, at = passage_head(blob)
  local seen, out = {}, {}
  for q = at, at - 1 + PASSAGE_KEY * m, PASSAGE_KEY do
    local key = string.sub(blob, q, q + PASSAGE_KEY - 1)
    if not seen[key] then
      seen[key] = true
      out[#out + 1] = key
    end
  end
  return out
end

-- Document ord's stored blob in parts: the fields that hold them (passage_blob_parts), written, and
-- read back whole (nil: none stored).
local function passage_blob_parts(ord, size)
  local base, out = ord % PASSAGE_GROUP, {}
  for j = 0, math.max(1, math.ceil(size / PASSAGE_PART)) - 1 do
    out[#out + 1] = string.format('%d', base + j * PASSAGE_GROUP)
  end
  return out
end
local function passage_blob_set(ord, blob)
  local key = passage_blob_key(ord)
  for j, field in ipairs(passage_blob_parts(ord, #blob)) do
    redis.call('HSET', key, field, string.sub(blob, (j - 1) * PASSAGE_PART + 1, j * PASSAGE_PART))
  end
end
local function passage_blob_get(ord)
  local key = passage_blob_key(ord)
  local part = redis.call('HGET', key, slot(ord, PASSAGE_GROUP))
  if not part then return nil end
  local parts = {part}
  while #part == PASSAGE_PART do
    part = redis.call('HGET', key, string.format('%d', ord % PASSAGE_GROUP + #parts * PASSAGE_GROUP))
    if not part then break end
    parts[#parts + 1] = part
  end
  return table.concat(parts)
end

-- Take ordinal o4 out of the bucket `key` of the band table t; a bucket left empty is deleted and the
-- table's field count goes down.
local function unbucket(t, key, o4)
  local group = group_of(t, band_hash(key))
  local value = redis.call('HGET', group, key)
  if not value then return end
  for q = 1, #value, OW do
    if string.sub(value, q, q + OW - 1) == o4 then
      value = string.sub(value, 1, q - 1) .. string.sub(value, q + OW)
      if #value == 0 then
        redis.call('HDEL', group, key)
        t.N = t.N - 1
      else
        redis.call('HSET', group, key, value)
      end
      return
    end
  end
end

-- Append ordinal o4 (larger than any posted) to the posting of `key`, unless it is full.
local function packed_post(t, key, o4)
  local group = group_of(t, band_hash(key))
  local v = redis.call('GET', group) or ''
  local rk = record_key(key)
  local first, last = posting_range(v, rk)
  if last - first >= POSTING_CAP then return end
  local at = last * (3 + OW)
  redis.call('SET', group, string.sub(v, 1, at) .. rk .. o4 .. string.sub(v, at + 1))
  t.N = t.N + 1
end

-- Take ordinal o4's records out of the index group that `key` (a stored blob's, PASSAGE_KEY raw bytes)
-- names: every record of that ordinal in the group is the document's own.
local function packed_unpost(t, key, o4)
  local group = group_of(t, band_hash(key))
  local v = redis.call('GET', group)
  if not v then return end
  local rw, removed = 3 + OW, 0
  local p = string.find(v, o4, 4, true)
  while p do
    if (p - 4) % rw == 0 then  -- the ordinal of the record at p - 3
      v = string.sub(v, 1, p - 4) .. string.sub(v, p - 3 + rw)
      removed = removed + 1
      p = string.find(v, o4, p - 3, true)
    else
      p = string.find(v, o4, p + 1, true)
    end
  end
  if removed > 0 then
    set_or_del(group, v)
    t.N = t.N - removed
  end
end

-- The postings of a text's keys (`wanted`: PASSAGE_KEY raw bytes each), in Lua, as ND.POSTINGS
-- answers them: every key's count (2 bytes, big-endian) in order, then every key's ordinals (OW bytes
-- each) in the same order. passages.lua reads through read_postings: this, or one ND.POSTINGS
-- (_postings_module.lua).
local function lua_postings(st, wanted)
  local rw = 3 + OW
  local counts, ords = {}, {}
  for q = 1, #wanted - PASSAGE_KEY + 1, PASSAGE_KEY do
    local key = string.sub(wanted, q, q + PASSAGE_KEY - 1)
    local value = redis.call('GET', group_of(st.pas, band_hash(key)))
    local size = 0
    if value then
      local lo, hi = posting_range(value, record_key(key))
      size = hi - lo
      for r = lo, hi - 1 do ords[#ords + 1] = string.sub(value, r * rw + 4, r * rw + 3 + OW) end
    end
    counts[#counts + 1] = string.char(math.floor(size / 256), size % 256)
  end
  return table.concat(counts) .. table.concat(ords)
end

-- Remove a document's postings and its passage blob (none stored: nothing to do).
local function remove_passages(st, ord)
  if not st.pas.on then return end
  local blob = passage_blob_get(ord)
  if not blob then return end
  local o4 = ordinal_bytes(ord)
  for _, key in ipairs(passage_keys(blob)) do packed_unpost(st.pas, key, o4) end
  redis.call('HDEL', passage_blob_key(ord), unpack(passage_blob_parts(ord, #blob)))
end

-- Remove a stored document's band entries, signature and record (the id field is the caller's).
local function remove_document(st, ord, old_bands)
  local o4 = ordinal_bytes(ord)
  for p = 1, #old_bands, 8 do unbucket(st.band, string.sub(old_bands, p, p + 7), o4) end
  remove_passages(st, ord)
  redis.call('HDEL', sig_key(ord), slot(ord, SIG_GROUP))
  redis.call('HDEL', doc_key(ord), slot(ord, DOC_GROUP))
  remove_site_page(ord)
  st.docs = st.docs - 1
end
