-- limit_charge.lua: a §6 charge on its own: the rate limiter's separate charge, and a turn's counters
-- that live in another slot than its conversation (the per-agent one, tagged layout), sent beside
-- the begin-turn script.
-- After: lib/clock.lua lib/gcra.lua
--
-- KEYS: the counters (gcra() of lib/gcra.lua; nothing after them).
-- ARGV: their count, now (µs, or '' for the node's clock), then per key its interval and tolerance.
-- Returns: one integer per key: 0 allowed, else the microseconds to wait.
-- Why one script: all or nothing across the counters, each read, decided and written back with no
-- other charge between.

local _, waits = gcra()
return waits
