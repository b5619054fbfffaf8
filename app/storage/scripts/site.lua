-- site.lua: one site's pages and its other sites, read at once (docs/design.md "Sites").
--
-- KEYS[1]  collection state hash
-- ARGV[1..9] shared head (see _common.lua), then ARGV[10] the site's name
-- Returns {'ok', pages (0: unknown site), {other name, other pages, shared, shared of other, ...}}
-- or {'nocollection'} / {'stale'}

local st, status = load_state()
if not st then return {status} end

local id = redis.call('HGET', SITE_NAMES, ARGV[10])
if not id then return {'ok', 0, {}} end
local pages = tonumber(redis.call('HGET', SITE_PAGES, id) or '0')

-- {other site id, shared, ...} of a site (its shared counts: see _common.lua's shared_add)
local function counts(site)
  local s, all = redis.call('GET', shared_key(site)) or '', {}
  for q = 1, #s, 8 do
    local other, n = struct.unpack('>I4>I4', s, q)
    all[#all + 1] = string.format('%d', other)
    all[#all + 1] = n
  end
  return all
end
local function count_of(site, other)
  local s = redis.call('GET', shared_key(site)) or ''
  local at = shared_at(s, struct.pack('>I4', tonumber(other)))
  return at and struct.unpack('>I4', s, at + 4) or 0
end

local all = counts(id)
local out = {}
for i = 1, #all, 2 do
  local other = all[i]
  out[#out + 1] = redis.call('HGET', SITE_IDS, other) or ''
  out[#out + 1] = tonumber(redis.call('HGET', SITE_PAGES, other) or '0')
  out[#out + 1] = tonumber(all[i + 1])
  out[#out + 1] = count_of(other, id)
end
return {'ok', pages, out}
