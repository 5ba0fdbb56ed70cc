-- lib/gcra.lua: GCRA (§6), the rate-limit arithmetic of every Redis script that charges limits, the
-- twin of gcra() in gateway/store/gcra.py: the same whole microseconds, so both decide alike. Needs
-- now_us() (lib/clock.lua, before it). Defines step(), keep(), gcra() and after_limits(n); a script
-- charging limits takes them as its leading KEYS and ARGV (gcra.script_arguments builds them).

-- step(key, interval, tolerance, now): one GCRA step on a counter, writing nothing: its new
-- theoretical arrival time and the wait (µs, 0 when allowed).
local function step(key, interval, tolerance, now)
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  tat = tat + interval
  local wait = tat - tolerance - now
  if wait < 0 then wait = 0 end
  return tat, wait
end

-- keep(key, tat, now): a charged counter written back (PX: gone once idle again).
local function keep(key, tat, now)
  redis.call('SET', key, string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000))
end

-- gcra(): GCRA over the leading KEYS[1..n], all or nothing. ARGV[1] n, ARGV[2] now (µs, or "" for
-- the node's clock), then per key its interval and tolerance (µs). Charges every key or none.
-- Returns refused (boolean), the waits (µs, 0 where allowed) and n.
local function gcra()
  local n = tonumber(ARGV[1])
  local now = now_us(ARGV[2])
  local tats, waits, refused = {}, {}, false
  for i = 1, n do
    tats[i], waits[i] = step(KEYS[i], tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i]), now)
    if waits[i] > 0 then refused = true end
  end
  if not refused then
    for i = 1, n do keep(KEYS[i], tats[i], now) end
  end
  return refused, waits, n
end

-- The KEYS and ARGV after the limits' own: what the rest of a script works on.
local function after_limits(n)
  local keys, argv = {}, {}
  for i = n + 1, #KEYS do keys[#keys + 1] = KEYS[i] end
  for i = 3 + 2 * n, #ARGV do argv[#argv + 1] = ARGV[i] end
  return keys, argv
end
