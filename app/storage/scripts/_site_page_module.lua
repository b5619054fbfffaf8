-- _site_page_module.lua: check.lua counts a page of a site in the document's ND.BANDS call (band_step's
-- `page`), which writes what _common.lua's add_site_page writes, so the page costs no command of its own.
local SITE_PAGE_IN_BANDS = true
