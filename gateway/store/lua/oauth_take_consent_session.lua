-- oauth_take_consent_session.lua: a consent session taken: deleted whether live or not (a dead one is
-- of no use), its fields answered if live.
--
-- KEYS: KEYS[1] consent session.
-- ARGV: ARGV[1] now.
-- Returns: {device hash, user, expires} of a live session; nil otherwise.
-- Why one script: read and deleted in one step, so a session is used once, by one of two concurrent
-- answers.

local v = redis.call('HMGET', KEYS[1], 'd', 'u', 'e')
if not v[1] then return false end
redis.call('DEL', KEYS[1])
if tonumber(v[3]) <= tonumber(ARGV[1]) then return false end
return v
