-- cluster_journal.lua: (Redis Cluster) the link journal's entries, as journal.lua reads them on one
-- server, without the sketches and records they name: those are on the data shards, and the store reads
-- them there (ClusterStore.link_journal). Read only.
--
-- KEYS[1] state hash (KEYS[2], KEYS[3] unused)
-- ARGV[1..9] the shared head (see _common.lua; its record prefix names the site keys on this slot, as
--   in cluster_sites.lua), then ARGV[10] most entries to return, ARGV[11] the highest field to return,
--   0 for the collection's last reserved ordinal now (journal.lua says why that bounds a reader)
-- Returns {'ok', the collection's clock in ms, the ordinal width (OW), {field, value, ...}, the highest
-- field it returned entries up to} or {'nocollection'} / {'stale'}

local st, status = load_state()
if not st then return {status} end

local limit = tonumber(ARGV[10])
local through = tonumber(ARGV[11])
if through == 0 then through = st.seq end
local entries = journal_entries(limit, through)
return {'ok', server_ms(), OW, entries, string.format('%d', through)}
