-- _site_page_module.lua: check.lua counts a page of a site in the document's ND.BANDS call (band_step's
-- `page`), which writes what _common.lua's add_site_page writes, so the page costs no command of its own.
local SITE_PAGE_IN_BANDS = true

-- Nothing more to check before the first write: band_step_ready's ND.BANDS call found the module, and
-- the same command takes the page.
local function site_page_ready(st) end
