-- _link_module.lua: link.lua's loop over the pairs as one call of ND.LINK, the command of neardup's
-- Valkey module (native/valkey/sites.cpp), which the embedded server loads. Same contract and the
-- same data as _link_lua.lua, in one command instead of several per pair.
local function link_step(st, floor, cutoff, max_partners, max_others, blob)
  local r = redis.call('ND.LINK', '1', EDGES, SHARED, DOC, EDGE_GROUP, DOC_GROUP,
    string.format('%d', math.max(floor, 0)), string.format('%d', cutoff), max_partners, max_others, blob)
  return r[1], r[2]
end
