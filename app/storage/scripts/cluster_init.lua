-- cluster_init.lua: (Redis Cluster) the empty state of a collection just registered.
--
-- KEYS[1] state hash   KEYS[2] pending hash   KEYS[3] late hash (one slot: the {collection} tag)
-- ARGV[1] gen   ARGV[2] retention ms (0: none)   ARGV[3] max documents (0: none)
-- ARGV[4] band groups   ARGV[5] id groups
-- Returns 'ok'

redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('HSET', KEYS[1], 'gen', ARGV[1], 'seq', 0, 'top', 0, 'docs', 0, 'low', 0, 'swept', 0,
  'ttl', ARGV[2], 'maxd', ARGV[3], 'bG', ARGV[4], 'iG', ARGV[5])
return 'ok'
