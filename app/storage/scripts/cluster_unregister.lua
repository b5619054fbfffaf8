-- cluster_unregister.lua: (Redis Cluster) remove a collection's registry entry, but only the entry of
-- the generation being dropped: a creation that raced the drop (a new state, then its own entry) keeps
-- its entry. With gen '' (no state was found) any entry of the name goes.
--
-- KEYS[1] registry hash
-- ARGV[1] name   ARGV[2] gen of the dropped state, or ''
-- Returns 1 if an entry was removed, else 0

local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then return 0 end
if ARGV[2] ~= '' and not string.find(entry, '"gen":"' .. ARGV[2] .. '"', 1, true) then return 0 end
return redis.call('HDEL', KEYS[1], ARGV[1])
