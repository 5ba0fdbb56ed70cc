-- limit_reserve.lua: a budget of failures reserved before the attempt is looked at (a wrong user_code,
-- RFC 8628 §5.1; an introspection credential): what decide() in gateway/store/limits.py says, charged
-- atomically. Every own counter must have a token; with every shared one too, those are charged, and
-- each grace counter that has a token as well; else, when every grace counter has a token, the own
-- and the grace ones are charged instead; else nothing is.
-- After: lib/clock.lua lib/gcra.lua
--
-- KEYS: the own, shared and grace counters, in that order, all of one hash slot.
-- ARGV: ARGV[1..3] how many of each, ARGV[4] now (µs, or '' for the node's clock), then per key its
-- interval and tolerance (µs).
-- Returns: the mode (0 refused, 1 shared, 2 grace), then per key its wait (µs), whether it was
-- charged (1/0) and whether it was left without a token (1/0).
-- Why one script: looked at in one step and spent in another, concurrent attempts would all pass the
-- look; here every counter is read, decided on and charged with no other attempt between.

local own, shared, grace = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = own + shared + grace
local now = now_us(ARGV[4])
local tats, waits = {}, {}
for i = 1, n do
  tats[i], waits[i] = step(KEYS[i], tonumber(ARGV[3 + 2 * i]), tonumber(ARGV[4 + 2 * i]), now)
end
local function clear(first, last)
  for i = first, last do if waits[i] > 0 then return false end end
  return true
end
local mode, charged = 0, {}
for i = 1, n do charged[i] = 0 end
if clear(1, own) then
  if clear(own + 1, own + shared) then
    mode = 1
    for i = 1, n do
      if i <= own + shared or waits[i] == 0 then charged[i] = 1 end
    end
  elseif grace > 0 and clear(own + shared + 1, n) then
    mode = 2
    for i = 1, n do
      if i <= own or i > own + shared then charged[i] = 1 end
    end
  end
end
local answer = {mode}
for i = 1, n do
  local emptied = 0
  if charged[i] == 1 then
    keep(KEYS[i], tats[i], now)
    if tats[i] + tonumber(ARGV[3 + 2 * i]) - tonumber(ARGV[4 + 2 * i]) > now then emptied = 1 end
  end
  answer[#answer + 1] = waits[i]
  answer[#answer + 1] = charged[i]
  answer[#answer + 1] = emptied
end
return answer
