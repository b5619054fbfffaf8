-- _cluster_buckets_lua.lua: cluster_ops.lua's band records in Lua (any server). The store prepends it,
-- or _cluster_buckets_module.lua where the node has this release's module loaded; both write the same data.
--
-- apply_buckets(prefix, w, cap, appends, removals): packed (12 + w)-byte records (group number, 4
-- bytes big-endian; band key, 8 bytes; ordinal, w bytes). Appends add the ordinal to the bucket unless
-- it is there already or the bucket holds `cap` ordinals; removals take it out, deleting an emptied
-- field. Returns the number of band fields created.
local function apply_buckets(prefix, w, cap, appends, removals)
  local full = w * cap
  local function has(value, o4)
    for q = 1, #value, w do
      if string.sub(value, q, q + w - 1) == o4 then return q end
    end
    return nil
  end
  local function records(blob)
    local p = 1 - (12 + w)
    return function()
      p = p + 12 + w
      if p > #blob then return nil end
      return prefix .. string.format('%d', struct.unpack('>I4', blob, p)),
        string.sub(blob, p + 4, p + 11), string.sub(blob, p + 12, p + 11 + w)
    end
  end

  local created = 0
  for key, field, o4 in records(appends) do
    if redis.call('HSETNX', key, field, o4) == 1 then
      created = created + 1
    else
      local value = redis.call('HGET', key, field)
      if #value < full and not has(value, o4) then redis.call('HSET', key, field, value .. o4) end
    end
  end
  for key, field, o4 in records(removals) do
    local value = redis.call('HGET', key, field)
    if value then
      local q = has(value, o4)
      if q then
        value = string.sub(value, 1, q - 1) .. string.sub(value, q + w)
        if #value == 0 then redis.call('HDEL', key, field) else redis.call('HSET', key, field, value) end
      end
    end
  end
  return created
end
