-- _bands_module.lua: check.lua's band step as one call of ND.BANDS, the command of neardup's Valkey
-- module (native/valkey/bands.cpp), which the embedded server loads. Same contract and the same data
-- as _bands_lua.lua, in one command instead of one to three per band plus the splits.
-- page: for a stored document of a site, {state, site key base, edge group, site name}: the page counted
-- in the same call (_site_page_module.lua), not by add_site_page.
local NO_PAGE = {'', '', '', ''}
local function band_step(st, own, o4, mode, cap, floor, limit, page)
  local t = st.band
  if mode == 'read' and #own == 0 then return {} end
  local r = redis.call('ND.BANDS', '1', t.prefix, t.L, t.S, t.N, t.target, mode, o4 or '', own, cap,
    string.format('%d', math.max(floor, 0)), limit, unpack(page or NO_PAGE))
  t.L, t.S, t.N = r[1], r[2], r[3]
  t.n = 2 ^ t.L
  local found, blob = {}, r[4]
  for q = 1, #blob, OW do found[#found + 1] = struct.unpack(OW_FORMAT, blob, q) end
  return found, blob  -- the ordinals, and as the command gave them (OW bytes each: the link step's)
end

-- Called before the script's first write: a server without the module (an external one restarted
-- without it) fails the script here, with nothing written, instead of half way through a batch.
local function band_step_ready(st)
  local t = st.band
  redis.call('ND.BANDS', '1', t.prefix, t.L, t.S, t.N, t.target, 'read', '', '', 1, 0, 1, unpack(NO_PAGE))
end
