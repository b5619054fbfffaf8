-- _cluster_buckets_lua.lua: cluster_ops.lua's band records in Lua (any server). The store prepends it,
-- or _cluster_buckets_module.lua where the node has this release's module loaded; both write the same data.
--
-- apply_buckets(prefix, w, cap, F, level0, target, appends, removals): packed (12 + w)-byte records
-- (family number, 4 bytes big-endian; band key, 8 bytes; ordinal, w bytes) of the band table's families
-- (_cluster_family.lua: `prefix`, F families whose groups start at level `level0`). Appends add the
-- ordinal to the bucket unless it is there already or the bucket holds `cap` ordinals; removals take it
-- out, deleting an emptied field. Each family first splits its groups for the fields its appends may
-- add (one split per `target` of them, and up to 4 more to catch up), so no group passes the target
-- much even for a call of thousands of records. Every key the call touches (shapes, the groups the
-- splits read and make, the records' groups) is checked before the first write: a key of a slot this
-- node does not serve refuses the call with nothing written. Returns the number of band fields created.
local function apply_buckets(prefix, w, cap, F, level0, target, appends, removals)
  local full = w * cap
  local top, x = 32, 1
  while x < F do x, top = 2 * x, top - 1 end
  local families = {}
  local function has(value, o4)
    for q = 1, #value, w do
      if string.sub(value, q, q + w - 1) == o4 then return q end
    end
    return nil
  end
  -- (family, band key, ordinal) of each record
  local function records(blob)
    local out = {}
    for p = 1, #blob, 12 + w do
      local t = open_family(families, prefix, struct.unpack('>I4', blob, p), level0)
      out[#out + 1] = {t, string.sub(blob, p + 4, p + 11), string.sub(blob, p + 12, p + 11 + w)}
    end
    return out
  end

  local adds, takes = records(appends), records(removals)
  local extra = {}
  for _, r in ipairs(adds) do extra[r[1]] = (extra[r[1]] or 0) + 1 end
  local plans, checked = {}, {}
  local function check(key)
    if not checked[key] then
      checked[key] = true
      redis.call('EXISTS', key)
    end
  end
  for _, t in pairs(families) do
    local count = extra[t] or 0
    local plan = family_splits(t, count, target, top, 4 + math.floor(count / target))
    plans[t] = plan
    for _, split in ipairs(plan) do
      check(split[1])
      check(split[2])
    end
  end
  -- the records' groups in each family's shape after its splits
  local function shape_after(t)
    local plan = plans[t]
    if #plan == 0 then return t end
    local last = plan[#plan]
    local L, n, S = t.L, last[3], last[4] + 1
    if S == n then n, S = 2 * n, 0 end
    while 2 ^ L < n do L = L + 1 end
    return {key = t.key, L = L, n = n, S = S, names = {}}
  end
  local after = {}
  for _, list in ipairs({adds, takes}) do
    for _, r in ipairs(list) do
      local t = r[1]
      after[t] = after[t] or shape_after(t)
      r[4] = family_group(after[t], r[2], F)
      check(r[4])
    end
  end

  for t, plan in pairs(plans) do split_family(t, plan, F) end
  local created = 0
  for _, r in ipairs(adds) do
    local t, field, o4, key = r[1], r[2], r[3], r[4]
    if redis.call('HSETNX', key, field, o4) == 1 then
      created = created + 1
      t.N = t.N + 1
      t.changed = true
    else
      local value = redis.call('HGET', key, field)
      if #value < full and not has(value, o4) then redis.call('HSET', key, field, value .. o4) end
    end
  end
  for _, r in ipairs(takes) do
    local t, field, o4, key = r[1], r[2], r[3], r[4]
    local value = redis.call('HGET', key, field)
    if value then
      local q = has(value, o4)
      if q then
        value = string.sub(value, 1, q - 1) .. string.sub(value, q + w)
        if #value == 0 then
          redis.call('HDEL', key, field)
          t.N = math.max(0, t.N - 1)
          t.changed = true
        else
          redis.call('HSET', key, field, value)
        end
      end
    end
  end
  for _, t in pairs(families) do
    if t.changed then redis.call('HSET', t.key, 'L', t.L, 'S', t.S, 'N', t.N) end
  end
  return created
end
