-- module_probe.lua: whether this server's neardup module runs every command the scripts send, as they
-- send it: the module variants of the steps are prepended (scripts.py), and each step runs here on
-- nothing. A module that reports this release's version but is another build (or was swapped under a
-- running service) answers an error here ("unknown protocol version", "wrong number of arguments"),
-- and the store takes the Lua steps instead. Writes nothing that stays: the passage step's blob is
-- deleted again.
--
-- ARGV[1..9] shared head (see _common.lua) of a collection that does not exist (RedisStore's probe keys)
-- Returns 'ok', or the first command's error

local st = {
  band = {prefix = BAND, L = 0, n = 1, S = 0, N = 0, target = BAND_TARGET},
  pas = {prefix = PASSAGE_INDEX, L = PASSAGE_LEVEL, n = 2 ^ PASSAGE_LEVEL, S = 0, N = 0, target = PASSAGE_TARGET},
}
band_step_ready(st)
read_postings(st, '')
link_step(st, 0, -1, 1, 1, '')
-- a blob of no words and no keys, 9 bytes (the shortest stored: check.lua stores none shorter)
passage_put(st, 1, ordinal_bytes(1), string.char(PASSAGE_FORMAT, 0, 0) .. string.rep('\0', 6))
redis.call('DEL', passage_blob_key(1))
return 'ok'
