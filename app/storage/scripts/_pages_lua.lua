-- _pages_lua.lua: check.lua's site step in Lua, for a server without neardup's module (or with one
-- older than version 2). Same contract and the same data as _pages_module.lua (one ND.PAGES command,
-- native/valkey/sites.cpp).
--
-- site_pages(list) counts new pages of sites, in order: list holds per page its ordinal and its
-- site's name (_common.lua's add_site_page: the name interned, the page counted, an entry).
local function site_pages(list)
  for k = 1, #list, 2 do add_site_page(list[k], list[k + 1]) end
end
