-- clock.lua: read-only; the collection's clock (_clock.lua) in Unix ms, on either store (on a cluster,
-- run on the state's slot): the time the service judges expiry by outside the scripts (GET, DELETE).
--
-- KEYS[1]  collection state hash (absent: the server's time, TIME)
-- Returns the clock in ms

return clock_ms(KEYS[1])
