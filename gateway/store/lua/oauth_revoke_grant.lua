-- oauth_revoke_grant.lua: a grant revoked (deleted, family and all).
--
-- KEYS: KEYS[1] grant.
-- ARGV: ARGV[1] now.
-- Returns: 1 when a live grant ended; 0 otherwise (none, or already expired).
-- Why one script: its expiry is read and it is deleted in one step, so of two revocations only one
-- counts it as ended.

local e = redis.call('HGET', KEYS[1], 'e')
if not e then return 0 end
redis.call('DEL', KEYS[1])
if tonumber(e) > tonumber(ARGV[1]) then return 1 end
return 0
