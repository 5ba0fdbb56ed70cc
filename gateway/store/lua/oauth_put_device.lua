-- oauth_put_device.lua: the tagged layout's second step of creating a device authorization (after
-- oauth_reserve_user_code.lua): the authorization written and its owner's index told.
-- After: lib/index_authorization.lua
--
-- KEYS: KEYS[1] device, KEYS[2] the owner's authorization index (one slot: the owner's).
-- ARGV: ARGV[1] now, ARGV[2] index ttl ms, ARGV[3] device ttl ms, ARGV[4] device hash, ARGV[5]
-- expires, then the device's fields and values.
-- Returns: 1.
-- Why one script: no authorization exists that its owner's index misses, so denying an owner's
-- authorizations (oauth_deny_by_index.lua) finds every one.

redis.call('HSET', KEYS[1], unpack(ARGV, 6))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
index_authorization(KEYS[2], ARGV[4], ARGV[5], ARGV[1], ARGV[2])
return 1
