-- journal.lua: the link journal's entries (check.lua's: a batch's documents of a site with candidates),
-- with what verifying them takes: the sketch and record of every ordinal they name. Read only; the
-- service verifies and settles them with link.lua (docs/design.md "Sites").
--
-- KEYS[1]  collection state hash
-- ARGV[1..9] shared head (see _common.lua), then ARGV[10] most entries to return, ARGV[11] the highest
--   field to return, 0 for the collection's last ordinal now: a field is its batch's first ordinal, so
--   the entries at or below the last ordinal of one call are those written before it, and a reader that
--   passes that bound on to its next calls never meets an entry written after its first
-- Returns {'ok', this server's time in ms, the ordinal width (OW), {field, value, ...},
--   {ordinal, sketch, record, ...}, the highest field it returned entries up to (ARGV[11], or the last
--   ordinal)}
-- (a gone document's sketch and record are '') or {'nocollection'} / {'stale'}

local st, status = load_state()
if not st then return {status} end

local limit = tonumber(ARGV[10])
local through = tonumber(ARGV[11])
if through == 0 then through = st.seq end
local entries, found, seen = journal_entries(limit, through), {}, {}

local function want(ord)
  if seen[ord] then return end
  seen[ord] = true
  found[#found + 1] = ord
  found[#found + 1] = redis.call('HGET', sig_key(ord), slot(ord, SIG_GROUP)) or ''
  found[#found + 1] = redis.call('HGET', doc_key(ord), slot(ord, DOC_GROUP)) or ''
end
for e = 2, #entries, 2 do
  local v = entries[e]
  local q = 1
  while q + OW + 3 <= #v do
    want(struct.unpack(OW_FORMAT, v, q))
    local m = struct.unpack('>I4', v, q + OW)
    q = q + OW + 4
    for _ = 1, m do
      want(struct.unpack(OW_FORMAT, v, q))
      q = q + OW
    end
  end
end
return {'ok', server_ms(), OW, entries, found, string.format('%d', through)}
