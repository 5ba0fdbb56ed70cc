-- oauth_index_approval.lua: the tagged layout's first step of an approval: the authorization added to
-- the approving user's index, in the user's slot (before oauth_settle_authorization.lua settles it
-- in the owner's, RedisOAuthStore._settle says why in that order).
-- After: lib/index_authorization.lua
--
-- KEYS: KEYS[1] an authorization index.
-- ARGV: ARGV[1] now, ARGV[2] index value (owner tag and device hash), ARGV[3] its expiry, ARGV[4]
-- ttl ms.
-- Returns: 1.
-- Why one script: the lapsed members dropped, the new one added and the set's TTL raised together,
-- so a concurrent addition never leaves the set shorter-lived than a member.

index_authorization(KEYS[1], ARGV[2], ARGV[3], ARGV[1], ARGV[4])
return 1
