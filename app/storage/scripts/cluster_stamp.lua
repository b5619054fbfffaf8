-- cluster_stamp.lua: (Redis Cluster) phase 2 of a check: stamp the batch's ordinals, in batch order,
-- after their band entries were appended (docs/design.md, "Why first seen wins").
--
-- Stamps only grow. They reach 2^52 (keys.STAMP_SCALE), past the 14 digits Lua keeps when it turns a
-- number into a string: every stamp is written with string.format('%d'), never joined with '..'.
-- An ordinal whose implicit stamp (ordinal * SCALE) is above the last stamp issued
-- (`top`) takes it and nothing is recorded; one that was overtaken by a larger ordinal gets top + 1,
-- recorded in the late hash. An ordinal no longer pending was stamped already (by an earlier try, or
-- as abandoned, below): its stamp is returned again, so a retry converges.
-- Pending ordinals older than ARGV[5] ms (by this server's clock, TIME: the one cluster_reserve.lua
-- marked them with) belong to checks that died between append and stamp: they
-- are stamped here (at most 100 per call, at most one sweep a second), as if the check had finished,
-- so a retry of the same id (a new version) or verification sorts them out.
--
-- KEYS[1] state hash   KEYS[2] pending hash   KEYS[3] late hash
-- ARGV[1] gen   ARGV[2] first ordinal   ARGV[3] n   ARGV[4] unused (was the client's time)
-- ARGV[5] abandon after (ms)
-- ARGV[6] new documents (ids that did not exist)   ARGV[7] SCALE   ARGV[8..] ordinals whose late
--   stamp can be forgotten (versions this batch replaced)
-- Returns {'ok', {stamp per document}, seq, max documents} or {'nocollection'} / {'stale'}, or {'lost'}
-- when the batch's ordinals are above the sequence: this state lost their reservation (a failover to
-- a replica that missed it), so nothing is stamped; the data shards still fence those ordinals.

local v = redis.call('HMGET', KEYS[1], 'gen', 'top', 'swept', 'seq', 'maxd')
if not v[1] then return {'nocollection'} end
if v[1] ~= ARGV[1] then return {'stale'} end
local top, swept = tonumber(v[2]), tonumber(v[3])
local first, n = tonumber(ARGV[2]), tonumber(ARGV[3])
if first + n - 1 > tonumber(v[4]) then return {'lost'} end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local abandon, scale = tonumber(ARGV[5]), tonumber(ARGV[7])

local function stamp(o)
  if redis.call('HDEL', KEYS[2], o) == 0 then
    return tonumber(redis.call('HGET', KEYS[3], o)) or o * scale
  end
  local s = o * scale
  if s <= top then
    s = top + 1
    redis.call('HSET', KEYS[3], string.format('%d', o), string.format('%d', s))
  end
  top = s
  return s
end

if now - swept > 1000 then
  local all = redis.call('HGETALL', KEYS[2])
  local old = {}
  for i = 1, #all, 2 do
    if tonumber(all[i + 1]) < now - abandon then old[#old + 1] = tonumber(all[i]) end
  end
  table.sort(old)
  for i = 1, math.min(#old, 100) do stamp(old[i]) end
  redis.call('HSET', KEYS[1], 'swept', now)
end

local stamps = {}
for o = first, first + n - 1 do stamps[#stamps + 1] = stamp(o) end
for i = 8, #ARGV do redis.call('HDEL', KEYS[3], ARGV[i]) end
redis.call('HSET', KEYS[1], 'top', string.format('%d', top))
if tonumber(ARGV[6]) ~= 0 then redis.call('HINCRBY', KEYS[1], 'docs', ARGV[6]) end
return {'ok', stamps, tonumber(v[4]), tonumber(v[5])}
