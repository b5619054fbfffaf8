-- _site_page_lua.lua: check.lua counts a page of a site with _common.lua's add_site_page (three
-- commands), where the server runs the Lua variants (_site_page_module.lua: in the ND.BANDS call).
local SITE_PAGE_IN_BANDS = false
