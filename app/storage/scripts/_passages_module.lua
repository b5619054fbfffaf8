-- _passages_module.lua: check.lua's passage step as one call of ND.PASSAGES, the command of neardup's
-- Valkey module (native/valkey/passages.cpp). Same contract and the same data as _passages_lua.lua, in
-- one command that reads the blob itself instead of one to three commands per fingerprint key.
local function passage_put(st, ord, o4, blob)
  local t = st.pas
  local r = redis.call('ND.PASSAGES', '1', t.prefix, t.L, t.S, t.N, t.target, passage_blob_key(ord),
    slot(ord, PASSAGE_GROUP), o4, blob, POSTING_CAP, OW, PASSAGE_GROUP, PASSAGE_PART)
  t.L, t.S, t.N = r[1], r[2], r[3]
  t.n = 2 ^ t.L
end
