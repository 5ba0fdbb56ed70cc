-- lib/charge_first.lua: what a begin-turn script does first, after lib/no_key.lua, lib/clock.lua and
-- lib/gcra.lua: nothing at all if its attempt was released (its last KEY is the token's
-- released-claim key, gateway/store/keys.py claim_released_key; its last ARGV the token), answering
-- {'released'}; then charge the §6 limits (the leading KEYS and ARGV, see lib/gcra.lua), or answer
-- {'limited', wait µs per limit} having claimed nothing. Leaves K and A, the script's own KEYS and
-- ARGV after the limits', and marker(deadline), a turn's in-flight value 'P{deadline ms}|{token}'.

if redis.call('EXISTS', KEYS[#KEYS]) == 1 then return {'released'} end
local refused, waits, n = gcra()
if refused then return {'limited', unpack(waits)} end
local K, A = after_limits(n)
local function marker(deadline) return 'P' .. deadline .. '|' .. A[#A] end
