-- _cluster_family.lua: (Redis Cluster) the families of the band and id tables, shared by the Lua band
-- records (_cluster_buckets_lua.lua), the id swaps (cluster_ops.lua) and the reads (cluster_bands.lua,
-- cluster_ids.lua); native/valkey/buckets.cpp does the same for the band table's ND.BUCKETS and
-- ND.BUCKETSGET, byte for byte.
--
-- A key's group hash h (a band key's first 4 bytes, little-endian; an id's first 32 bits of SHA-1)
-- picks its family, h mod F (F families, a power of two: the state's bG, iG). A family is one slot:
-- its keys share the hash tag that ends the family's shape key, a hash of L (level), S (split pointer)
-- and N (fields), and its groups are the shape key's name followed by the group number. Inside the
-- family the group is floor(h / F) mod 2^L, or mod 2^(L+1) when that is below S: linear hashing, as
-- one server's tables (_common.lua), so a family grows by splitting its own groups and nothing moves
-- to another slot. An absent shape is (level0, 0, 0).

-- The hash of a key inside its family, for a table of F families.
local function band_in_family(F)
  return function(field)
    local a, b, c, d = string.byte(field, 1, 4)
    return math.floor((a + b * 256 + c * 65536 + d * 16777216) / F)
  end
end
local function id_in_family(F)
  return function(id) return math.floor(tonumber(string.sub(redis.sha1hex(id), 1, 8), 16) / F) end
end

-- The last level of a table of F families: the family's hash has 32 - log2(F) bits.
local function family_top(F)
  local top, x = 32, 1
  while x < F do x, top = 2 * x, top - 1 end
  return top
end

-- The family whose shape key is `key`, its shape read once per call (a key of another node's slot is
-- refused here, before the caller writes anything). `hash`: band_in_family or id_in_family.
local function open_family(families, key, level0, hash)
  local t = families[key]
  if not t then
    local v = redis.call('HMGET', key, 'L', 'S', 'N')
    local L = tonumber(v[1]) or level0
    t = {key = key, L = L, n = 2 ^ L, S = tonumber(v[2]) or 0, N = tonumber(v[3]) or 0, names = {},
         changed = false, hash = hash, extra = 0}
    families[key] = t
  end
  return t
end

-- The key of the group of `field` in a family of shape t (L, n, S).
local function family_group(t, field)
  local h = t.hash(field)
  local g = h % t.n
  if g < t.S then g = h % (2 * t.n) end
  local name = t.names[g]
  if not name then
    name = t.key .. string.format('%d', g)
    t.names[g] = name
  end
  return name
end

-- The splits family t makes for its `t.extra` new fields (one per `target` of them, and up to 4 more
-- to catch up): {source group, new group, n, S} each, in order.
local function family_splits(t, target, top)
  local out, L, n, S = {}, t.L, t.n, t.S
  local most = 4 + math.floor(t.extra / target)
  while t.N + t.extra > target * (n + S) and #out < most and L < top do
    out[#out + 1] = {t.key .. string.format('%d', S), t.key .. string.format('%d', S + n), n, S}
    S = S + 1
    if S == n then
      L, n, S = L + 1, 2 * n, 0
    end
  end
  return out
end

-- Before a call's writes: plan each family's splits, find each item's group ({family, field} ->
-- item[3], the group key in the shape after the splits), check every key the call will touch (the
-- splits' groups, the items' groups: a key of a slot this node does not serve refuses the call here,
-- with nothing written), then make the splits. Splitting first keeps a group near the target even in
-- a call of thousands of new fields.
local function prepare_families(families, target, top, items)
  local plans, after, checked = {}, {}, {}
  local function check(key)
    if not checked[key] then
      checked[key] = true
      redis.call('EXISTS', key)
    end
  end
  for key, t in pairs(families) do
    local plan = family_splits(t, target, top)
    plans[key] = plan
    local shape = t
    if #plan > 0 then
      local last = plan[#plan]
      local n, S = last[3], last[4] + 1
      if S == n then n, S = 2 * n, 0 end
      shape = {key = t.key, n = n, S = S, names = {}, hash = t.hash}
    end
    after[key] = shape
    for _, split in ipairs(plan) do
      check(split[1])
      check(split[2])
    end
  end
  for _, item in ipairs(items) do
    item[3] = family_group(after[item[1].key], item[2])
    check(item[3])
  end
  for key, plan in pairs(plans) do
    local t = families[key]
    for _, split in ipairs(plan) do
      local src, dst, n, S = split[1], split[2], split[3], split[4]
      local all = redis.call('HGETALL', src)
      local moved, fields = {}, {}
      for i = 1, #all, 2 do
        if t.hash(all[i]) % (2 * n) ~= S then
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
    -- at once: a later error in the call must not leave moved fields behind an old shape
    if #plan > 0 then redis.call('HSET', t.key, 'L', t.L, 'S', t.S, 'N', t.N) end
  end
end

-- After a call's writes: the shape of each family whose fields changed or that split.
local function save_families(families)
  for _, t in pairs(families) do
    if t.changed then redis.call('HSET', t.key, 'L', t.L, 'S', t.S, 'N', t.N) end
  end
end
