-- cluster_sites.lua: (Redis Cluster) the site steps of a collection with a site_field (docs/design.md,
-- "Sites on a cluster"). Every site key of the collection is on its state slot (keys.SiteKeys: the
-- head's record prefix is '<base>:{c}:d:', so _common.lua's site functions name '<base>:{c}:sn' ...),
-- and each step below is one call there: atomic, as the one script of a check is on one server. The
-- functions are _common.lua's and _link_lua.lua's, the same code and the same data as on one server.
-- The stamp (cluster_stamp.lua) counts a batch's pages; these are the steps before and after it.
--
-- KEYS[1] state hash (KEYS[2], KEYS[3]: the pending and late hashes, unused)
-- ARGV[1..9] the shared head (see _common.lua), then ARGV[10] the step:
--   'remove': a check's first write, before its reservation lands anything (or a delete's, a
--     reclaim's): ARGV[11] k, ARGV[12 .. 11 + k] the batch's site names (a batch that could need more
--     new site ids than are left is refused here, before anything is written), ARGV[12 + k ..] the
--     ordinals whose pages go (replaced, deleted or reclaimed versions; none counted: nothing).
--     Idempotent. Returns {'ok'}.
--   'settle': after a check's read: ARGV[11] the settle ('' for none: see _common.lua's parse_settle;
--     earlier batches' verified cross-site pairs, linked, their journal fields deleted), ARGV[12] the
--     link journal field of this check ('0': none), ARGV[13] its entry now that the candidates are read
--     (check.lua's format; '': no document of a site has any, the field goes), in place of the one
--     cluster_stamp.lua wrote. Returns {'ok', edges added, edges refused by a bound}.
--   (A batch's pages are counted by its stamp, cluster_stamp.lua, in the same script.)
-- or {'nocollection'} / {'stale'}
--
-- A pair's document is live while its entry is there and it is above the eviction floor: the records
-- are on the data shards, so an edge to a document expired since its check and not yet reclaimed is
-- made, and removed with it when it is reclaimed (every site read reclaims first).

local st, status = load_state()
if not st then return {status} end

if ARGV[10] == 'remove' then
  local k = tonumber(ARGV[11])
  local refused = site_ids_refusal({unpack(ARGV, 12, 11 + k)})
  if refused then return refused end
  for i = 12 + k, #ARGV do remove_site_page(tonumber(ARGV[i])) end
  return {'ok'}
end

local added, refused = 0, 0
local settle = parse_settle(ARGV[11])
if settle then
  if #settle.pairs > 0 then
    added, refused = link_step(st, floor_of(st), -1, settle.partners, settle.others, settle.pairs)
  end
  if #settle.fields > 0 then redis.call('HDEL', LINK_JOURNAL, unpack(settle.fields)) end
end
if ARGV[12] ~= '0' then
  if ARGV[13] ~= '' then
    redis.call('HSET', LINK_JOURNAL, ARGV[12], ARGV[13])
  else
    redis.call('HDEL', LINK_JOURNAL, ARGV[12])
  end
end
return {'ok', added, refused}
