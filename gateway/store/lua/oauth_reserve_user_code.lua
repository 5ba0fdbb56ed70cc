-- oauth_reserve_user_code.lua: the tagged layout's first step of creating a device authorization: its
-- user code taken, unless a live authorization holds it (whichever layout's value,
-- 'device|expires[|tag]').
--
-- KEYS: KEYS[1] user-code index (a slot of its own: found from the code alone).
-- ARGV: ARGV[1] now, ARGV[2] index value ('device|expires|owner tag'), ARGV[3] ttl ms.
-- Returns: 1 once taken; 0 when a live authorization holds it.
-- Why one script: the holder is read and replaced in one step, so two creations that drew the same
-- code cannot both take it; what decides is the deadline the value records (the caller's clock),
-- not the key's TTL.

local held = redis.call('GET', KEYS[1])
if held and tonumber(string.match(held, '^[^|]*|([^|]*)')) > tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
