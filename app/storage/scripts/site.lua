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
local all = redis.call('HGETALL', shared_key(id))
local out = {}
for i = 1, #all, 2 do
  local other = all[i]
  out[#out + 1] = redis.call('HGET', SITE_IDS, other) or ''
  out[#out + 1] = tonumber(redis.call('HGET', SITE_PAGES, other) or '0')
  out[#out + 1] = tonumber(all[i + 1])
  out[#out + 1] = tonumber(redis.call('HGET', shared_key(other), id) or '0')
end
return {'ok', pages, out}
