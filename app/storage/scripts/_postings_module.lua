-- _postings_module.lua: passages.lua's read of the passage index as one ND.POSTINGS (neardup's module:
-- native/valkey/passages.cpp) instead of a read and a binary search in Lua per key; the same reply as
-- _common.lua's lua_postings.
local function read_postings(st, wanted)
  local t = st.pas
  return redis.call('ND.POSTINGS', '1', t.prefix, t.L, t.S, OW, wanted)
end
