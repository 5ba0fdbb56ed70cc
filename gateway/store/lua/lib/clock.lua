-- lib/clock.lua: now_us(given), the time a charge is made at (µs): ``given`` if it is a number (a
-- test's clock), else this node's clock as the script runs (see gateway/store/gcra.py: the one clock
-- every charge to a counter meets, in the order the charges run). lib/gcra.lua runs after it, and so
-- does a script that gives charges back or looks at counters.

local function now_us(given)
  local at = tonumber(given)
  if at then return at end
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end
