-- cluster_stamp.lua: (Redis Cluster) phase 3 of a check, its commit point: stamp the batch's ordinals,
-- in batch order, after their band entries were appended (docs/design.md, "Why first seen wins").
--
-- Only the check that reserved an ordinal commits it, here, and only while it is still pending: an
-- ordinal no longer pending is dead (swept as abandoned below, fenced by a retry: cluster_fence.lua)
-- or committed already (this very call, run twice), and either way the batch is refused ('dead'):
-- nothing of it is stamped, and its ordinals still pending are made dead at once. The check answers
-- 503 and its retry starts clean; a refusal is never taken for a stamp.
--
-- Stamps only grow. They reach 2^52 (keys.STAMP_SCALE), past the 14 digits Lua keeps when it turns a
-- number into a string: every stamp is written with string.format('%d'), never joined with '..'.
-- An ordinal whose implicit stamp (ordinal * SCALE) is above the last stamp issued (`top`) takes it
-- and nothing is recorded; one that was overtaken by a larger ordinal gets top + 1, recorded in the
-- late hash. A dead ordinal is recorded there too, with 0 (no stamp is 0): readers skip it, and its
-- band entries are dead.
--
-- The abandon sweep: pending ordinals reserved more than the collection's abandon time ago (its state's
-- `abandon`, ms, fixed at creation; compared with this server's clock, TIME, the one
-- cluster_reserve.lua marked them with) are made dead, at most 100 per call, at most one sweep a
-- second. Their checks are refused if they ever come back.
--
-- Sites (a collection with a site_field: docs/design.md, "Sites on a cluster"): the stamp counts the
-- batch's pages in the same script, with _common.lua's functions on the site keys of this slot (the
-- head's record prefix names them; the store prepends _common.lua for such a collection only:
-- scripts.Script's `common`), so a committed document is counted and a refused one never; and
-- it writes the batch's link journal entry with every document of a site marked as not yet read
-- (JOURNAL_UNREAD), which the check replaces with the candidates once it has read them: an entry left
-- so (its check died) is settled by reading those documents' candidates (Index._link_journal). A batch
-- that could need more site ids than are left is refused here, its ordinals made dead.
--
-- KEYS[1] state hash   KEYS[2] pending hash   KEYS[3] late hash
-- ARGV[1..9] the shared head (_common.lua; ARGV[1] the gen)   ARGV[10] first ordinal   ARGV[11] n
-- ARGV[12] new documents (ids that did not exist)   ARGV[13] SCALE   ARGV[14] k   ARGV[15 .. 14 + k]
--   ordinals whose late entry can be forgotten (versions this batch replaced: their record is gone, so
--   nothing of them can be seen again)   ARGV[15 + k .. 14 + k + n] (a site_field only) per document its
--   site ('' for none, and for an earlier occurrence of an id the batch sends again)
-- Returns {'ok', {stamp per document}, seq, max documents}, or {'dead'} (refused, above), or
-- {'nocollection'} / {'stale'}, or {'lost'} when the batch's ordinals are above the sequence: this
-- state lost their reservation (a failover to a replica that missed it), so nothing is stamped; the
-- data shards still fence those ordinals.

local v = redis.call('HMGET', KEYS[1], 'gen', 'top', 'swept', 'seq', 'maxd', 'abandon')
if not v[1] then return {'nocollection'} end
if v[1] ~= ARGV[1] then return {'stale'} end
local top, swept, seq = tonumber(v[2]), tonumber(v[3]), tonumber(v[4])
local first, n = tonumber(ARGV[10]), tonumber(ARGV[11])
if first + n - 1 > seq then return {'lost'} end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local abandon, scale = tonumber(v[6]), tonumber(ARGV[13])
local forget = tonumber(ARGV[14])
local sites = {unpack(ARGV, 15 + forget, 14 + forget + n)}

-- A pending ordinal made dead: no longer pending, and recorded as dead for its readers.
local function kill(o)
  if redis.call('HDEL', KEYS[2], o) == 1 then redis.call('HSET', KEYS[3], o, 0) end
end

if now - swept > 1000 then
  local all = redis.call('HGETALL', KEYS[2])
  local old = {}
  for i = 1, #all, 2 do
    if tonumber(all[i + 1]) < now - abandon then old[#old + 1] = tonumber(all[i]) end
  end
  table.sort(old)
  for i = 1, math.min(#old, 100) do kill(string.format('%d', old[i])) end
  redis.call('HSET', KEYS[1], 'swept', now)
end

local ordinals = {}
for o = first, first + n - 1 do ordinals[#ordinals + 1] = string.format('%d', o) end
if n > 0 then
  for _, mark in ipairs(redis.call('HMGET', KEYS[2], unpack(ordinals))) do
    if not mark then
      for _, o in ipairs(ordinals) do kill(o) end
      return {'dead'}
    end
  end
end
if #sites > 0 then
  local no_site_id = site_ids_refusal(sites)
  if no_site_id then
    for _, o in ipairs(ordinals) do kill(o) end
    return no_site_id
  end
end

local stamps = {}
for i, o in ipairs(ordinals) do
  redis.call('HDEL', KEYS[2], o)
  local s = (first + i - 1) * scale
  if s <= top then
    s = top + 1
    redis.call('HSET', KEYS[3], o, string.format('%d', s))
  end
  top = s
  stamps[#stamps + 1] = s
end
for i = 15, 14 + forget do redis.call('HDEL', KEYS[3], ARGV[i]) end
redis.call('HSET', KEYS[1], 'top', string.format('%d', top))
if tonumber(ARGV[12]) ~= 0 then redis.call('HINCRBY', KEYS[1], 'docs', ARGV[12]) end
local unread = {}
for i, site in ipairs(sites) do  -- none without a site_field
  if site ~= '' then
    local ord = first + i - 1
    add_site_page(ord, site)
    unread[#unread + 1] = ordinal_bytes(ord) .. struct.pack('>I4', JOURNAL_UNREAD)
  end
end
if #unread > 0 then redis.call('HSET', LINK_JOURNAL, ARGV[10], table.concat(unread)) end
return {'ok', stamps, seq, tonumber(v[5])}
