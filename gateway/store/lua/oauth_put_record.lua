-- oauth_put_record.lua: a record (a consent session, a landing record) written whole, replacing any.
--
-- KEYS: KEYS[1] a hash.
-- ARGV: ARGV[1] ttl ms, then its fields and values.
-- Returns: 1.
-- Why one script: never seen half written, mixed with an older one, or without its TTL.

redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
