-- _clock.lua: the collection's clock, the one time that records' insertion times and retention go by
-- (docs/design.md, "Retention"). The store prepends this file to every script that reads it, on both
-- stores (on a cluster, the state node's scripts).
--
-- It is the server's clock (TIME) kept from going back: it never moves back, so insertion times grow
-- with ordinals and the reclaim walk from `low` (due.lua, cluster_retention.py) is right, and a
-- document once expired stays expired. The state keeps it as `clock` (ms) with `tick`, the server's
-- time up to which it has been moved. A reading moves it to
--   max(TIME, clock + max(0, TIME - tick) / 2)
-- in whole ms (an odd ms of TIME - tick is left for the next reading: `tick` moves by twice what the
-- clock moved):
-- equal to TIME while TIME is ahead of it (always, until TIME is set back); when TIME was set back, it
-- stands still across the step, then runs at half the speed of TIME until TIME has caught up with it
-- (twice the time the step took back), so it never drifts from TIME for good. A step forward moves it
-- (and expires what the step passed over); a step back of D makes documents stored in the 2 D after it
-- live up to twice their TTL (at most D longer).
-- Scripts that write save the reading (clock_save); read-only ones only read it.

local CLOCK_READ = nil  -- this call's reading: {state key, clock, tick}

-- The collection's clock in Unix ms (an integer), read once per script call.
local function clock_ms(state)
  if not CLOCK_READ then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local v = redis.call('HMGET', state, 'clock', 'tick')
    local clock, tick = tonumber(v[1]), tonumber(v[2])
    local ms, mark = now, now
    if clock and tick and now < tick then  -- TIME went back: the clock stands still
      ms = clock
    elseif clock and tick then
      local half = math.floor((now - tick) / 2)
      if clock + half > now then ms, mark = clock + half, tick + 2 * half end
    end
    CLOCK_READ = {state, ms, mark}
  end
  return CLOCK_READ[2]
end

-- Keep this call's reading in the state (scripts that stamp records or reclaim by it).
local function clock_save()
  if CLOCK_READ then
    redis.call('HSET', CLOCK_READ[1], 'clock', string.format('%d', CLOCK_READ[2]),
      'tick', string.format('%d', CLOCK_READ[3]))
  end
end
