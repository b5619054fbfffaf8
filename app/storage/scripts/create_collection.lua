-- create_collection.lua: register a collection and its empty state, unless the name is taken.
--
-- KEYS[1] registry hash   KEYS[2] the collection's state hash
-- ARGV[1] name   ARGV[2] parameters JSON (with its gen)   ARGV[3] gen
-- ARGV[4] retention in ms (0: none)   ARGV[5] max documents (0: no limit)
-- ARGV[6..9] initial L and S of the band table, then of the id table (2^L + S groups, sized for the
--   collection's capacity; all 0: one group each, grown by splits)
-- ARGV[10] passages: '1' on (the passage index's shape pL, pS, pN is created with the state: 2^8 groups,
--   pL 8: keys.PASSAGE_INDEX_LEVEL, _common.lua's PASSAGE_LEVEL), '0' off
-- ARGV[11] sketches per signature hash (keys.sig_group_size), fixed for the collection's life
-- Returns {'created'} or {'exists', stored parameters JSON}

local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then return {'exists', existing} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'gen', ARGV[3], 'seq', 0, 'docs', 0,
  'bL', tonumber(ARGV[6]) or 0, 'bS', tonumber(ARGV[7]) or 0, 'bN', 0,
  'iL', tonumber(ARGV[8]) or 0, 'iS', tonumber(ARGV[9]) or 0, 'iN', 0,
  'ttl', tonumber(ARGV[4]) or 0, 'maxd', tonumber(ARGV[5]) or 0, 'low', 0, 'sg', ARGV[11])
if ARGV[10] == '1' then redis.call('HSET', KEYS[2], 'pL', 8, 'pS', 0, 'pN', 0) end
return {'created'}
