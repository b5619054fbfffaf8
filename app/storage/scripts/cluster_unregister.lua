-- cluster_unregister.lua: (Redis Cluster) remove a collection's registry entry, but only the entry of
-- the generation being dropped (the entry its state kept): a creation that raced the drop (a new
-- state, then its own entry) keeps its entry. With '' (no state was found: a drop that died after
-- deleting it) any entry of the name goes.
--
-- KEYS[1] registry hash
-- ARGV[1] name   ARGV[2] the dropped state's registry entry, or ''
-- Returns 1 if an entry was removed, else 0

local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then return 0 end
if ARGV[2] ~= '' and entry ~= ARGV[2] then return 0 end
return redis.call('HDEL', KEYS[1], ARGV[1])
