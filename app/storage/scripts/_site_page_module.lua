-- _site_page_module.lua: check.lua counts a page of a site in the document's ND.BANDS call (protocol 5,
-- neardup's module version 7: band_step's `page`), which writes what _common.lua's add_site_page writes,
-- so the page costs no command of its own.
local SITE_PAGE_IN_BANDS = true

-- Called before the script's first write where the batch has a page of a site (as band_step_ready): a
-- server whose module is older than the scripts were chosen for fails the script here, with nothing
-- written.
local function site_page_ready(st)
  local t = st.band
  redis.call('ND.BANDS', '5', t.prefix, t.L, t.S, t.N, t.target, 'read', '', '', 1, 0, 1, OW, '', '', '', '')
end
