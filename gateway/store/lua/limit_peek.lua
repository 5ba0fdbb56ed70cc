-- limit_peek.lua: the counters looked at, no write: what gcra() would decide on, decided by the
-- caller (RateLimiter.waits: how long until each has a token).
-- After: lib/clock.lua
--
-- KEYS: the counters to look at.
-- ARGV: ARGV[1] now (µs, or '' for the node's clock).
-- Returns: that now, then each counter's stored time ('' where idle).
-- Why one script: the node's clock and the counters are read at one instant, as a charge would read
-- them.

local values = {now_us(ARGV[1])}
for i = 1, #KEYS do values[i + 1] = redis.call('GET', KEYS[i]) or '' end
return values
