#!lua flags=allow-cross-slot-keys
-- cluster_ops.lua: (Redis Cluster) one node's share of a batch's writes, in one call: the client
-- groups every key of the batch by the node that owns its slot (keys are passed in ARGV, not KEYS:
-- they span many slots of this node, which allow-cross-slot-keys permits for local keys only).
--
-- ARGV[1] band group prefix; ARGV[2] appends, ARGV[3] removals: packed 16-byte records
--   (group number, 4 bytes big-endian; band key, 8 bytes; ordinal, 4 bytes), one string each, so a
--   batch of thousands of band entries costs the client three arguments, not thousands:
--   appends:  add the ordinal to the bucket (group, band key), unless already there or the bucket
--             holds ARGV[4] ordinals already (keys.BUCKET_CAP)
--   removals: take the ordinal out of the bucket; delete the field when it empties
-- ARGV[4] most ordinals a bucket keeps; then sections from ARGV[5], each a count then its tuples,
-- applied in this order after the band records:
--   sets     (key, field, value):    HSET (signatures, records)
--   deletes  (key, field):           HDEL
--   swaps    (key, id, expected, new): compare-and-set of the id table: if the id names `expected`
--            ('' = absent), set it to `new` ('' = delete) and answer 1; if it names `new` already (a
--            retry), answer 2; else answer the current value ('' = absent)
--   unlinks  (key):                  UNLINK (a dropped collection's keys)
--   claims   (key, field, value):    the signature and record slots of a new ordinal: HSET if the
--            slot is empty (answer 1) or holds this very value (a retry: written again, answer 2);
--            another value means the ordinal is in use already (a failover lost its reservation,
--            docs/design.md "Fencing"): left as it is, answer 0
-- Returns {new band fields created, {swap answers}, {claim answers}}

local BAND = ARGV[1]
local FULL = 4 * tonumber(ARGV[4])
local pos = 5
local function section(width)
  local count = tonumber(ARGV[pos])
  local first = pos + 1
  pos = first + count * width
  return first, count
end

local function has(value, o4)
  for q = 1, #value, 4 do
    if string.sub(value, q, q + 3) == o4 then return q end
  end
  return nil
end

local function records(blob)
  local p = -15
  return function()
    p = p + 16
    if p > #blob then return nil end
    return BAND .. string.format('%d', struct.unpack('>I4', blob, p)),
      string.sub(blob, p + 4, p + 11), string.sub(blob, p + 12, p + 15)
  end
end

local created = 0
for key, field, o4 in records(ARGV[2]) do
  if redis.call('HSETNX', key, field, o4) == 1 then
    created = created + 1
  else
    local value = redis.call('HGET', key, field)
    if #value < FULL and not has(value, o4) then redis.call('HSET', key, field, value .. o4) end
  end
end

for key, field, o4 in records(ARGV[3]) do
  local value = redis.call('HGET', key, field)
  if value then
    local q = has(value, o4)
    if q then
      value = string.sub(value, 1, q - 1) .. string.sub(value, q + 4)
      if #value == 0 then redis.call('HDEL', key, field) else redis.call('HSET', key, field, value) end
    end
  end
end

local first, count = section(3)
for i = first, first + 3 * (count - 1), 3 do redis.call('HSET', ARGV[i], ARGV[i + 1], ARGV[i + 2]) end

first, count = section(2)
for i = first, first + 2 * (count - 1), 2 do redis.call('HDEL', ARGV[i], ARGV[i + 1]) end

local answers = {}
first, count = section(4)
for i = first, first + 4 * (count - 1), 4 do
  local key, id, expected, new = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local cur = redis.call('HGET', key, id) or ''
  if cur == expected then
    if new == '' then redis.call('HDEL', key, id) else redis.call('HSET', key, id, new) end
    answers[#answers + 1] = 1
  elseif cur == new then
    answers[#answers + 1] = 2
  else
    answers[#answers + 1] = cur
  end
end
first, count = section(1)
for i = first, first + count - 1 do redis.call('UNLINK', ARGV[i]) end
local claims = {}
first, count = section(3)
for i = first, first + 3 * (count - 1), 3 do
  local cur = redis.call('HGET', ARGV[i], ARGV[i + 1])
  if not cur or cur == ARGV[i + 2] then
    redis.call('HSET', ARGV[i], ARGV[i + 1], ARGV[i + 2])
    claims[#claims + 1] = cur and 2 or 1
  else
    claims[#claims + 1] = 0
  end
end
return {created, answers, claims}
