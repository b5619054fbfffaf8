-- _postings_module.lua: passages.lua's read of the passage index as one ND.POSTINGS (neardup's module:
-- native/valkey/passages.cpp) instead of a read and a binary search in Lua per key; the same visits as
-- _common.lua's lua_postings.
local function read_postings(st, wanted, visit)
  local t = st.pas
  local reply = redis.call('ND.POSTINGS', '1', t.prefix, t.L, t.S, OW, wanted)
  local p = 1
  for q = 1, #wanted - PASSAGE_KEY + 1, PASSAGE_KEY do
    local a, b = string.byte(reply, p, p + 1)
    local size = a * 256 + b
    p = p + 2
    if size > 0 then
      visit(string.sub(wanted, q, q + PASSAGE_KEY - 1), reply, p, p + (size - 1) * OW, OW, size)
      p = p + size * OW
    end
  end
end
