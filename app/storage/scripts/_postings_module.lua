-- _postings_module.lua: passages.lua's read of a format-3 index as one ND.POSTINGS (neardup's module,
-- version 5 or later: native/valkey/passages.cpp) instead of a read and a binary search in Lua per key;
-- the same visits as _common.lua's lua_postings, which still reads formats 1 and 2.
local function read_postings(st, wanted, width, visit)
  if st.pas.format < 3 then return lua_postings(st, wanted, width, visit) end
  local t = st.pas
  local reply = redis.call('ND.POSTINGS', t.prefix, t.L, t.S, OW, wanted)
  local p = 1
  for q = 1, #wanted - width + 1, width do
    local a, b = string.byte(reply, p, p + 1)
    local size = a * 256 + b
    p = p + 2
    if size > 0 then
      visit(string.sub(wanted, q, q + width - 1), reply, p, p + (size - 1) * OW, OW, size)
      p = p + size * OW
    end
  end
end
