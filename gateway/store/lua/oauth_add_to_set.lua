-- oauth_add_to_set.lua: a member added to a set (a grant to its Brand user's, tagged layout), the set
-- living at least as long as it.
--
-- KEYS: KEYS[1] a set.
-- ARGV: ARGV[1] member, ARGV[2] ttl ms: the set lives at least that long.
-- Returns: 1.
-- Why one script: the addition and the TTL raised together, so a concurrent one never leaves the set
-- shorter-lived than a member.

redis.call('SADD', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
