-- link.lua: record verified matches between documents of different sites (docs/design.md "Sites"),
-- after the check that found them returned. Idempotent: an edge already there is skipped, so a retried
-- check converges; an edge whose document is gone (deleted, replaced, expired or evicted since) is
-- skipped too, so nothing comes back to life. The loop over the pairs is link_step: _link_module.lua
-- (one ND.LINK command) where the server has this release's neardup module, else _link_lua.lua (the same
-- data).
--
-- KEYS[1]  collection state hash
-- ARGV[1..9] shared head (see _common.lua), then ARGV[10] most partners per document (keys.SITE_PARTNERS),
--   ARGV[11] most other sites per site (keys.SITE_OTHERS), ARGV[12] the pairs, in the order to try
--   them: per pair the checked document's ordinal, then its match's, each 8 bytes big-endian (one
--   argument: thousands of small ones cost the client more than the script), ARGV[13..] link journal
--   fields these pairs settle (check.lua's), deleted with them
-- Returns {'ok', edges added, edges refused by a bound} or {'nocollection'} / {'stale'}

local st, status = load_state()
if not st then return {status} end

-- The TTL cutoff is taken here, once, from this server's clock: the module command gets it as an
-- argument, so the command replays from the append-only file with the same answer.
local cutoff = -1
if st.ttl > 0 then cutoff = tonumber(server_ms()) - st.ttl end
local added, refused = link_step(st, floor_of(st), cutoff, tonumber(ARGV[10]), tonumber(ARGV[11]), ARGV[12])
if #ARGV > 12 then redis.call('HDEL', LINK_JOURNAL, unpack(ARGV, 13)) end
return {'ok', added, refused}
