-- _cluster_buckets_lua.lua: cluster_ops.lua's band records in Lua (any server). The store prepends it,
-- or _cluster_buckets_module.lua where the node has this release's module loaded; both write the same data.
--
-- apply_buckets(prefix, w, cap, F, level0, target, appends, removals, kw): packed (4 + kw + w)-byte
-- records (family number, 4 bytes big-endian; key, kw bytes: a band key's 8, a passage fingerprint
-- key's 4; ordinal, w bytes) of a table's families
-- (_cluster_family.lua: `prefix`, F families whose groups start at level `level0`). Appends add the
-- ordinal to the bucket unless it is there already or the bucket holds `cap` ordinals; removals take it
-- out, deleting an emptied field. Each family first splits its groups for the fields its appends may
-- add (one split per `target` of them, and up to 4 more to catch up), so no group passes the target
-- much even for a call of thousands of records. Every key the call touches (shapes, the groups the
-- splits read and make, the records' groups) is checked before the first write: a key of a slot this
-- node does not serve refuses the call with nothing written. Returns the number of band fields created.
local function apply_buckets(prefix, w, cap, F, level0, target, appends, removals, kw)
  local full = w * cap
  local hash = band_in_family(F)
  local families = {}
  local function has(value, o4)
    for q = 1, #value, w do
      if string.sub(value, q, q + w - 1) == o4 then return q end
    end
    return nil
  end
  -- {family, band key, (its group), ordinal} of each record
  local items, adds, takes = {}, {}, {}
  local function records(blob, out, counted)
    for p = 1, #blob, 4 + kw + w do
      local key = prefix .. string.format('%d', struct.unpack('>I4', blob, p)) .. '}'
      local t = open_family(families, key, level0, hash)
      if counted then t.extra = t.extra + 1 end
      local item = {t, string.sub(blob, p + 4, p + 3 + kw), nil, string.sub(blob, p + 4 + kw, p + 3 + kw + w)}
      out[#out + 1] = item
      items[#items + 1] = item
    end
  end
  records(appends, adds, true)
  records(removals, takes, false)
  prepare_families(families, target, family_top(F), items)

  local created = 0
  for _, r in ipairs(adds) do
    local t, field, key, o4 = r[1], r[2], r[3], r[4]
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
    local t, field, key, o4 = r[1], r[2], r[3], r[4]
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
  save_families(families)
  return created
end
