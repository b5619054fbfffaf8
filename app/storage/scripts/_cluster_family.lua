-- _cluster_family.lua: (Redis Cluster) the band table's families, shared by the Lua band records
-- (_cluster_buckets_lua.lua) and the bucket read (cluster_bands.lua); native/valkey/buckets.cpp does
-- the same for ND.BUCKETS and ND.BUCKETSGET, byte for byte.
--
-- A band key's group hash h (its first 4 bytes, little-endian) picks its family, h mod F (F families,
-- a power of two, the state's bG). A family is one slot: its keys share the hash tag that ends the
-- family's shape key `prefix .. f .. '}'`, a hash of L (level), S (split pointer) and N (fields), and
-- its groups are `shape .. g`. Inside the family the group is floor(h / F) mod 2^L, or mod 2^(L+1)
-- when that is below S: linear hashing, as one server's table (_common.lua), so a family grows by
-- splitting its own groups and nothing moves to another slot. An absent shape is (level0, 0, 0).

local function family_hash(field, F)
  local a, b, c, d = string.byte(field, 1, 4)
  return math.floor((a + b * 256 + c * 65536 + d * 16777216) / F)
end

-- Family `f`'s shape, read once per call (a key of another node's slot is refused here, before the
-- caller writes anything).
local function open_family(families, prefix, f, level0)
  local t = families[f]
  if not t then
    local key = prefix .. string.format('%d', f) .. '}'
    local v = redis.call('HMGET', key, 'L', 'S', 'N')
    local L = tonumber(v[1]) or level0
    t = {key = key, L = L, n = 2 ^ L, S = tonumber(v[2]) or 0, N = tonumber(v[3]) or 0, names = {},
         changed = false}
    families[f] = t
  end
  return t
end

-- The key of the group of band key `field` in family t.
local function family_group(t, field, F)
  local h = family_hash(field, F)
  local g = h % t.n
  if g < t.S then g = h % (2 * t.n) end
  local name = t.names[g]
  if not name then
    name = t.key .. string.format('%d', g)
    t.names[g] = name
  end
  return name
end

-- The splits family t would make with `extra` more fields, at most `most` (the source and new group
-- of each, in order): the caller checks every one of these keys before it writes anything.
local function family_splits(t, extra, target, top, most)
  local out, L, n, S = {}, t.L, t.n, t.S
  while t.N + extra > target * (n + S) and #out < most and L < top do
    out[#out + 1] = {t.key .. string.format('%d', S), t.key .. string.format('%d', S + n), n, S}
    S = S + 1
    if S == n then
      L, n, S = L + 1, 2 * n, 0
    end
  end
  return out
end

-- Make the splits of family_splits (moving the fields of group S whose hash says S + n there) and move
-- t's shape past them.
local function split_family(t, splits, F)
  for _, split in ipairs(splits) do
    local src, dst, n, S = split[1], split[2], split[3], split[4]
    local all = redis.call('HGETALL', src)
    local moved, fields = {}, {}
    for i = 1, #all, 2 do
      if family_hash(all[i], F) % (2 * n) ~= S then
        moved[#moved + 1] = all[i]
        moved[#moved + 1] = all[i + 1]
        fields[#fields + 1] = all[i]
      end
    end
    if #fields > 0 then
      redis.call('HDEL', src, unpack(fields))
      redis.call('HSET', dst, unpack(moved))
    end
    t.S = S + 1
    if t.S == n then
      t.L, t.n, t.S = t.L + 1, 2 * n, 0
    end
    t.changed = true
  end
end
