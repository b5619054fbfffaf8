-- _bands_lua.lua: check.lua's band step in Lua (any Redis or Valkey server). The store prepends it, or
-- _bands_module.lua where the server has this release's neardup module loaded; both write the same data.
--
-- band_step(st, own, o4, mode, cap, floor, limit): append ordinal o4 (OW bytes) to the buckets of band keys
-- `own` (8 raw bytes each) unless mode is 'read' or the bucket holds `cap` ordinals already, split the
-- band table as needed, and return (unless mode is 'put') the ordinals already in those buckets and
-- above `floor`, each once: in the order first met, or, when there are more than `limit`, the `limit`
-- of them that the most of the buckets hold, then the smallest (ND.BANDS answers the same).
local function ranked(found, shared, floor, limit)
  local live = found
  if floor > 0 then
    live = {}
    for _, c in ipairs(found) do
      if c > floor then live[#live + 1] = c end
    end
  end
  if #live <= limit then return live end
  -- Grouped by how many buckets hold them (a small integer: at most the bands), most first, each
  -- group sorted by ordinal with the built-in comparison. A sort of every candidate with a Lua
  -- comparator was most of a crowded check's time: a crowd puts hundreds of ordinals in each check.
  local by, top = {}, 0
  for _, c in ipairs(live) do
    local times = shared[c]
    local group = by[times]
    if not group then
      group = {}
      by[times] = group
      if times > top then top = times end
    end
    group[#group + 1] = c
  end
  local out = {}
  for times = top, 1, -1 do
    local group = by[times]
    if group then
      table.sort(group)
      for j = 1, math.min(#group, limit - #out) do out[#out + 1] = group[j] end
      if #out == limit then break end
    end
  end
  return out
end

local function band_step(st, own, o4, mode, cap, floor, limit)
  local writes, report = mode ~= 'read', mode ~= 'put'
  local found, seen = {}, {}
  local full = OW * cap
  -- HSETNX first: most buckets of a new document are new, and then one command does it all; a shared
  -- bucket then costs three (HSETNX, HGET, HSET). A document that has already hit two shared buckets
  -- is most likely a near-copy whose other buckets are shared too: for those, HGET first (two
  -- commands either way). At 50,000 passages of the benchmark corpus a third of the documents are
  -- such copies; this cut the commands per document by ~12%.
  local hits = 0
  for p = 1, #own, 8 do
    local field = string.sub(own, p, p + 7)
    local key = group_of(st.band, band_hash(field))
    if writes and hits < 2 and redis.call('HSETNX', key, field, o4) == 1 then
      st.band.N = st.band.N + 1
    else
      local value = redis.call('HGET', key, field)
      if value then
        hits = hits + 1
        if report then
          for q = 1, #value, OW do
            local c = struct.unpack(OW_FORMAT, value, q)
            local times = seen[c]
            if times then
              seen[c] = times + 1
            else
              seen[c] = 1
              found[#found + 1] = c
            end
          end
        end
        if writes and #value < full then redis.call('HSET', key, field, value .. o4) end
      elseif writes then  -- HGET first (after two hits) and the bucket is new
        redis.call('HSET', key, field, o4)
        st.band.N = st.band.N + 1
      end
    end
  end
  if writes then grow(st.band) end
  return ranked(found, seen, floor, limit)
end

-- Nothing to check before the first write: every command this step uses is the server's own.
local function band_step_ready(st) end
