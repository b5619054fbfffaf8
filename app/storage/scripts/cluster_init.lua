-- cluster_init.lua: (Redis Cluster) create a collection's state, unless it exists: the state (one slot,
-- the {collection} tag) is where a cluster collection's existence and parameters are decided, so
-- creation is atomic and idempotent here. A retry of the same creation (same gen) is told 'created'
-- again; another creation (another gen) is told what exists. An existing state is never rewritten:
-- its sequence can never go back to 0.
--
-- KEYS[1] state hash   KEYS[2] pending hash   KEYS[3] late hash
-- ARGV[1] gen   ARGV[2] retention ms (0: none)   ARGV[3] max documents (0: none)
-- ARGV[4] band families   ARGV[5] id families   ARGV[6] the registry entry (parameters JSON)
-- ARGV[7] sketches per signature hash (keys.sig_group_size), fixed for the collection's life
-- ARGV[8] the abandon time in ms: a reservation pending longer is made dead (cluster_stamp.lua); one
--   time for every process that writes the collection, fixed for its life
-- ARGV[9], ARGV[10] the level a band family's and an id family's groups start at (keys.cluster_groups;
--   they grow from there)
-- ARGV[11] passage families (keys.CLUSTER_PASSAGE_FAMILIES; 0: the collection has passages off), kept
--   as `pG` only when on; their groups start at level 0
-- ARGV[12] 1 when the collection has a site_field (kept as `sS`: its site keys are on this slot,
--   cluster_sites.lua), else 0
-- Returns {'created'} or {'exists', gen, registry entry}

local cur = redis.call('HMGET', KEYS[1], 'gen', 'params')
if cur[1] then
  if cur[1] == ARGV[1] then return {'created'} end
  return {'exists', cur[1], cur[2] or ''}
end
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HSET', KEYS[1], 'gen', ARGV[1], 'seq', 0, 'top', 0, 'docs', 0, 'low', 0, 'swept', 0,
  'ttl', ARGV[2], 'maxd', ARGV[3], 'bG', ARGV[4], 'iG', ARGV[5], 'params', ARGV[6], 'sg', ARGV[7],
  'abandon', ARGV[8], 'bL', ARGV[9], 'iL', ARGV[10])
if tonumber(ARGV[11] or '0') > 0 then redis.call('HSET', KEYS[1], 'pG', ARGV[11]) end
if ARGV[12] == '1' then redis.call('HSET', KEYS[1], 'sS', 1) end
return {'created'}
