-- link.lua: record verified matches between documents of different sites (docs/design.md "Sites"),
-- after the check that found them returned. Idempotent: an edge already there is skipped, so a retried
-- check converges; an edge whose document is gone (deleted, replaced, expired or evicted since) is
-- skipped too, so nothing comes back to life.
--
-- KEYS[1]  collection state hash
-- ARGV[1..9] shared head (see _common.lua), then ARGV[10] most partners per document (keys.SITE_PARTNERS),
--   ARGV[11] most other sites per site (keys.SITE_OTHERS), then pairs ARGV[12 + 2*(j-1)] the checked
--   document's ordinal and ARGV[13 + 2*(j-1)] its match's ordinal, in the order to try them
-- Returns {'ok', edges added, edges refused by a bound} or {'nocollection'} / {'stale'}

local st, status = load_state()
if not st then return {status} end

local max_partners, max_others = tonumber(ARGV[10]), tonumber(ARGV[11])
local floor = floor_of(st)
local cutoff = -1
if st.ttl > 0 then cutoff = tonumber(server_ms()) - st.ttl end

local function live(ord)
  if ord <= floor then return false end
  if cutoff < 0 then return true end
  local record = redis.call('HGET', doc_key(ord), slot(ord, DOC_GROUP))
  return record ~= false and record_ms(record) >= cutoff
end

-- Room for a new other site b in site a's `shared` (always, when b is there already).
local function room(a, b)
  local key = shared_key(a)
  return redis.call('HEXISTS', key, b) == 1 or redis.call('HLEN', key) < max_others
end

local added, refused = 0, 0
local step = OW + 4
for j = 12, #ARGV - 1, 2 do
  local x, y = tonumber(ARGV[j]), tonumber(ARGV[j + 1])
  local xkey, xfield = edge_key(x), slot(x, EDGE_GROUP)
  local ykey, yfield = edge_key(y), slot(y, EDGE_GROUP)
  local vx = redis.call('HGET', xkey, xfield)
  local vy = vx and redis.call('HGET', ykey, yfield)
  if vx and vy and x ~= y then
    local a, b = struct.unpack('>I4', vx, 1), struct.unpack('>I4', vy, 1)
    local y4 = ordinal_bytes(y)
    if a ~= b and not partner_at(vx, y4) and live(x) and live(y) then
      local new_x, new_y = not has_site(vx, b), not has_site(vy, a)
      if (#vx - 4) / step >= max_partners or (#vy - 4) / step >= max_partners
          or (new_x and not room(a, b)) or (new_y and not room(b, a)) then
        refused = refused + 1
      else
        redis.call('HSET', xkey, xfield, vx .. y4 .. struct.pack('>I4', b))
        redis.call('HSET', ykey, yfield, vy .. ordinal_bytes(x) .. struct.pack('>I4', a))
        if new_x then shared_add(a, b, 1) end
        if new_y then shared_add(b, a, 1) end
        added = added + 1
      end
    end
  end
end
return {'ok', added, refused}
