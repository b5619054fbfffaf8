-- cluster_reserve.lua: (Redis Cluster) phase 0 of a check: take n ordinals from the collection's
-- sequence and mark them pending (appended soon, not stamped: later than any check that reads them).
--
-- KEYS[1] state hash   KEYS[2] pending hash
-- ARGV[1] gen the client computed for   ARGV[2] n
-- ARGV[3] (optional) reserve past this ordinal: the sequence jumps to it if it is behind (fencing: the
--   data shards showed it in use, see docs/design.md "Fencing")   ARGV[4..] this caller's earlier
--   reservation, given up after a clash: no longer pending, and not made dead, as the clashed ordinal
--   is another document's (its implicit stamp makes it readable again)
-- The pending mark is this server's time (TIME), never a service process's: the sweep in
-- cluster_stamp.lua compares it with the same server's clock, so a skewed or stepped client clock
-- cannot make a live check look abandoned.
-- Returns {'ok', first ordinal, band groups, id groups, the collection's clock in ms (_clock.lua: the
-- batch's records carry it as their insertion time, so insertion times grow with ordinals)} or
-- {'nocollection'} / {'stale'}

local v = redis.call('HMGET', KEYS[1], 'gen', 'seq', 'bG', 'iG')
if not v[1] then return {'nocollection'} end
if v[1] ~= ARGV[1] then return {'stale'} end
local n, seq = tonumber(ARGV[2]), tonumber(v[2])
if ARGV[3] and tonumber(ARGV[3]) > seq then seq = tonumber(ARGV[3]) end
if #ARGV > 3 then redis.call('HDEL', KEYS[2], unpack(ARGV, 4)) end
local last = 2 ^ 40 - 1  -- the last ordinal of keys.ORDINAL_WIDTH bytes (keys.max_ordinal)
if seq + n > last then
  return redis.error_reply(string.format('ordinals of this collection exhausted (last %d)', last))
end
redis.call('HSET', KEYS[1], 'seq', string.format('%d', seq + n))
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local marks = {}
for o = seq + 1, seq + n do
  marks[#marks + 1] = o
  marks[#marks + 1] = now
end
if n > 0 then redis.call('HSET', KEYS[2], unpack(marks)) end
local inserted = string.format('%d', clock_ms(KEYS[1]))
clock_save()
return {'ok', seq + 1, tonumber(v[3]), tonumber(v[4]), inserted}
