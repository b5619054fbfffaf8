-- _postings_lua.lua: passages.lua's read of the passage index in Lua (any server; _common.lua's
-- lua_postings). The store prepends it, or _postings_module.lua where the server has neardup's module.
local read_postings = lua_postings
