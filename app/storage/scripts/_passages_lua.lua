-- _passages_lua.lua: check.lua's passage step in Lua (any Redis or Valkey server). The store prepends
-- it, or _passages_module.lua where the server has neardup's module loaded; both write the same data.
--
-- passage_put(st, ord, o4, blob): store document ord's passage blob (as sent),
-- append its ordinal o4 (OW bytes) to the posting of each distinct fingerprint key of the blob that
-- holds fewer than POSTING_CAP ordinals (a new key gets a posting of its own), in the blob's order,
-- then split the index as needed.
local function passage_put(st, ord, o4, blob)
  passage_blob_set(ord, blob)
  local t = st.pas
  for _, key in ipairs(passage_keys(blob)) do packed_post(t, key, o4) end
  grow(t)
end
