-- oauth_create_authorization.lua: a device authorization created in the previous layout (RFC 8628
-- §3.2): its user code taken unless a live authorization holds it, the authorization written, and
-- the owner's index told.
-- After: lib/index_authorization.lua
--
-- KEYS: KEYS[1] user-code index, KEYS[2] device, KEYS[3] the owner's authorization index (three
-- slots: this layout runs on one Redis or under Sentinel only).
-- ARGV: ARGV[1] now, ARGV[2] index value ('device|expires'), ARGV[3] index ttl ms, ARGV[4] device ttl
-- ms, ARGV[5] device hash, ARGV[6] expires, then the device's fields and values.
-- Returns: 1 once created; 0 when a live authorization holds the user code (the caller draws another).
-- Why one script: two creations that drew the same code cannot both take it, and no code is taken
-- without its authorization, nor an authorization written that the owner's index (a denial by owner)
-- would miss.

local held = redis.call('GET', KEYS[1])
if held and tonumber(string.match(held, '^[^|]*|([^|]*)')) > tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('HSET', KEYS[2], unpack(ARGV, 7))
redis.call('PEXPIRE', KEYS[2], ARGV[4])
index_authorization(KEYS[3], ARGV[5], ARGV[6], ARGV[1], ARGV[3])
return 1
