-- passages.lua: read-only; the postings of some of a text's fingerprint keys (docs/design.md,
-- "Passages"). The service sends a text's keys in calls of at most keys.PASSAGE_KEYS_PER_CALL, scores
-- the stored documents itself and reads the blobs of the best with passage_sources.lua: one call reads
-- at most that many postings of at most POSTING_CAP ordinals, whatever the text's size.
--
-- KEYS[1]  collection state hash
-- ARGV[1..9] shared head (see _common.lua), then ARGV[10] fingerprint keys (raw, 4 bytes each:
--   PASSAGE_KEY)
-- Returns {'ok', postings, floor, this server's time in ms} or {'nocollection'} / {'stale'}: postings
--   as ND.POSTINGS answers them (every key's 2-byte count, then every key's ordinals, OW bytes each);
--   floor: ordinals at or below it are evicted by max_documents (expiry by time is the caller's
--   check, with the returned time).

local st, status = load_state()
if not st then return {status} end
if not st.pas.on then return {'ok', string.rep('\0', 2 * #ARGV[10] / PASSAGE_KEY), 0, server_ms()} end
return {'ok', read_postings(st, ARGV[10]), floor_of(st), server_ms()}
