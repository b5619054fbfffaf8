-- _pages_module.lua: check.lua's site step as one call of ND.PAGES, the command of neardup's Valkey
-- module (native/valkey/sites.cpp). Same contract and the same data as _pages_lua.lua, in one command
-- per batch instead of three per page.
local function site_pages(list)
  local parts = {}
  for k = 1, #list, 2 do
    local ord, name = list[k], list[k + 1]
    parts[#parts + 1] = struct.pack('>I4>I4>I4', math.floor(ord / 4294967296), ord % 4294967296, #name) .. name
  end
  redis.call('ND.PAGES', '1', KEYS[1], SITE_NAMES, SITE_IDS, SITE_PAGES, SHARED, EDGES, EDGE_GROUP,
    table.concat(parts))
end
