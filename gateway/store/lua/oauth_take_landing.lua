-- oauth_take_landing.lua: a landing record (what the consent page shows after an answer) taken:
-- deleted whether live or not, like a consent session.
--
-- KEYS: KEYS[1] landing record.
-- ARGV: ARGV[1] now.
-- Returns: {outcome, scopes, carried, dropped, expires, details, carried details, dropped details}
-- of a live record (a record written before details existed: '' for them); nil otherwise.
-- Why one script: read and deleted in one step, so a record is shown once.

local v = redis.call('HMGET', KEYS[1], 'o', 's', 'c', 'x', 'e', 'ad', 'ak', 'ax')
if not v[1] then return false end
redis.call('DEL', KEYS[1])
if tonumber(v[5]) <= tonumber(ARGV[1]) then return false end
for i = 6, 8 do v[i] = v[i] or '' end
return v
