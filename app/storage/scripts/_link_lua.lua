-- _link_lua.lua: link.lua's loop over the pairs in Lua, for a server without this release's module. Same
-- contract and the same data as _link_module.lua (one ND.LINK command, native/valkey/sites.cpp).
--
-- link_step(st, floor, cutoff, max_partners, max_others, blob) records the pairs of `blob` (per pair
-- the checked document's ordinal, then its match's, each 8 bytes big-endian) in order; returns
-- (edges added, edges refused by a bound).
local function link_step(st, floor, cutoff, max_partners, max_others, blob)
  local function live(ord)
    if ord <= floor then return false end
    if cutoff < 0 then return true end
    local record = redis.call('HGET', doc_key(ord), slot(ord, DOC_GROUP))
    return record ~= false and record_ms(record) >= cutoff
  end

  -- Count a page of site a with a first partner on site b: true, or false (nothing changed) when that
  -- would add b to a's `shared` and a has max_others other sites already.
  local function count(a, b) return shared_add(a, b, 1, max_others) end
  local function uncount(a, b)
    shared_add(a, b, -1)
  end

  local added, refused = 0, 0
  local step = OW + 4
  local cur, vx, xkey, xfield, a, xsites, xlive, dirty = nil, nil, nil, nil, nil, nil, false, false
  local function flush()
    if dirty then redis.call('HSET', xkey, xfield, vx) end
    dirty = false
  end
  for p = 1, #blob, 16 do
    local xh, xl, yh, yl = struct.unpack('>I4>I4>I4>I4', blob, p)
    local x, y = xh * 4294967296 + xl, yh * 4294967296 + yl
    if x ~= cur then
      flush()
      cur, xkey, xfield = x, edge_key(x), slot(x, EDGE_GROUP)
      vx = redis.call('HGET', xkey, xfield)
      if vx then
        a, xsites, xlive = struct.unpack('>I4', vx, 1), {}, live(x)
        for q = 5 + OW, #vx, step do xsites[struct.unpack('>I4', vx, q)] = true end
      end
    end
    if vx and xlive and x ~= y then
      local ykey, yfield = edge_key(y), slot(y, EDGE_GROUP)
      local vy = redis.call('HGET', ykey, yfield)
      local y4 = ordinal_bytes(y)
      if vy and struct.unpack('>I4', vy, 1) ~= a and not partner_at(vx, y4) and live(y) then
        local b = struct.unpack('>I4', vy, 1)
        local new_x, new_y = not xsites[b], not has_site(vy, a)
        local ok = (#vx - 4) / step < max_partners and (#vy - 4) / step < max_partners
        -- count first (shared_add answers whether a bound refused a new pair of sites), undo if one says no
        local counted_x = ok and new_x and count(a, b)
        if ok and new_x and not counted_x then ok = false end
        if ok and new_y and not count(b, a) then
          ok = false
          if counted_x then uncount(a, b) end
        end
        if ok then
          vx = vx .. y4 .. struct.pack('>I4', b)
          xsites[b], dirty = true, true
          redis.call('HSET', ykey, yfield, vy .. ordinal_bytes(x) .. struct.pack('>I4', a))
          added = added + 1
        else
          refused = refused + 1
        end
      end
    end
  end
  flush()
  return added, refused
end
