#!lua flags=allow-cross-slot-keys
-- cluster_ops.lua: (Redis Cluster) one node's share of a batch's writes, in one call: the client
-- groups every key of the batch by the node that owns its slot (keys are passed in ARGV, not KEYS:
-- they span many slots of this node, which allow-cross-slot-keys permits for local keys only).
--
-- ARGV[1] band family prefix (_cluster_family.lua); ARGV[2] appends, ARGV[3] removals: packed
--   (12 + W)-byte records (family number, 4 bytes big-endian; band key, 8 bytes; ordinal, W bytes),
--   one string each, so a batch of thousands of band entries costs the client three arguments, not
--   thousands:
--   appends:  add the ordinal to the bucket (its group in the family), unless already there or the
--             bucket holds ARGV[4] ordinals already (keys.BUCKET_CAP)
--   removals: take the ordinal out of the bucket; delete the field when it empties
--   then each family written splits groups until it is under ARGV[8] fields per group again
-- ARGV[4] most ordinals a bucket keeps; ARGV[5] W, the ordinal width in bytes (keys.ORDINAL_WIDTH);
-- ARGV[6] F, the band families; ARGV[7] the level a family's groups start at; ARGV[8] fields per
-- band group before a split (keys.CLUSTER_BAND_TARGET); ARGV[9] the id families, ARGV[10] the level
-- their groups start at, ARGV[11] ids per id group before a split (keys.CLUSTER_ID_TARGET);
-- ARGV[12] passage family prefix (collections with passages), ARGV[13] posting appends, ARGV[14]
--   posting removals: records of the band records' shape with a 4-byte key (family; fingerprint key;
--   ordinal), applied the same way to the passage index's families (their groups start at level 0,
--   split at ARGV[8] fields per group), ARGV[15] most ordinals a posting keeps (keys.POSTING_CAP),
--   ARGV[16] the passage families; then sections from ARGV[17], each a count then its tuples,
-- applied in this order after the band and posting records:
--   sets     (key, field, value):    HSET (signatures, records)
--   deletes  (key, field):           HDEL
--   swaps    (key, id, expected, new): compare-and-set of the id table (`key`: the shape key of the
--            id's family, _cluster_family.lua, which finds its group and splits the family's groups
--            for the new ids first, as the band records do): if the id names `expected`
--            ('' = absent), set it to `new` ('' = delete) and answer 1; if it names `new` already (a
--            retry), answer 2; else answer the current value ('' = absent)
--   unlinks  (key):                  UNLINK (a dropped collection's keys)
--   claims   (key, field, value):    the signature and record slots of a new ordinal: HSET if the
--            slot is empty (answer 1) or holds this very value (a retry: written again, answer 2);
--            another value means the ordinal is in use already (a failover lost its reservation,
--            docs/design.md "Fencing"): left as it is, answer 0
-- The band records are applied by apply_buckets: in Lua (_cluster_buckets_lua.lua), or by the module's
-- ND.BUCKETS where the node has neardup's module (_cluster_buckets_module.lua); the same bytes.
-- Returns {new band fields created, {swap answers}, {claim answers}}

local BAND = ARGV[1]
local W = tonumber(ARGV[5])
local IDF, ID_LEVEL, ID_TARGET = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local pos = 17
local function section(width)
  local count = tonumber(ARGV[pos])
  local first = pos + 1
  pos = first + count * width
  return first, count
end

local created = apply_buckets(BAND, W, tonumber(ARGV[4]), tonumber(ARGV[6]), tonumber(ARGV[7]),
  tonumber(ARGV[8]), ARGV[2], ARGV[3], 8)
apply_buckets(ARGV[12], W, tonumber(ARGV[15]), tonumber(ARGV[16]), 0, tonumber(ARGV[8]), ARGV[13], ARGV[14], 4)

local first, count = section(3)
for i = first, first + 3 * (count - 1), 3 do redis.call('HSET', ARGV[i], ARGV[i + 1], ARGV[i + 2]) end

first, count = section(2)
for i = first, first + 2 * (count - 1), 2 do redis.call('HDEL', ARGV[i], ARGV[i + 1]) end

local answers = {}
first, count = section(4)
local id_families, swaps = {}, {}
if count > 0 then
  local hash = id_in_family(IDF)
  for i = first, first + 4 * (count - 1), 4 do
    local t = open_family(id_families, ARGV[i], ID_LEVEL, hash)
    if ARGV[i + 2] == '' then t.extra = t.extra + 1 end
    swaps[#swaps + 1] = {t, ARGV[i + 1], nil, ARGV[i + 2], ARGV[i + 3]}
  end
  prepare_families(id_families, ID_TARGET, family_top(IDF), swaps)
end
for _, swap in ipairs(swaps) do
  local t, id, key, expected, new = swap[1], swap[2], swap[3], swap[4], swap[5]
  local cur = redis.call('HGET', key, id) or ''
  if cur == expected then
    if new == '' then
      redis.call('HDEL', key, id)
      if cur ~= '' then t.N, t.changed = math.max(0, t.N - 1), true end
    else
      redis.call('HSET', key, id, new)
      if cur == '' then t.N, t.changed = t.N + 1, true end
    end
    answers[#answers + 1] = 1
  elseif cur == new then
    answers[#answers + 1] = 2
  else
    answers[#answers + 1] = cur
  end
end
save_families(id_families)
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
