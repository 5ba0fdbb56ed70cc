-- limit_refund.lua: one charge given back to each counter a request charged before another counter
-- refused it (§6, all or nothing across scripts of several slots).
-- After: lib/clock.lua
--
-- KEYS: the counters to give back to.
-- ARGV: ARGV[1] now (µs, or '' for the node's clock), then per key its interval (µs).
-- Returns: 0.
-- Why one script: each counter is read and written back with no charge between. GCRA charges add up
-- while a counter is busy, so taking one interval off leaves it as if this request had not come (an
-- idle counter goes).

local now = now_us(ARGV[1])
for i = 1, #KEYS do
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0') - tonumber(ARGV[1 + i])
  if tat > now then
    redis.call('SET', KEYS[i], string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000))
  else
    redis.call('DEL', KEYS[i])
  end
end
return 0
