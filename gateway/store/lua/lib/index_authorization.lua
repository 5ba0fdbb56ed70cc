-- lib/index_authorization.lua: index_authorization(i, m, e, now, ttl), member m, expiring at e
-- (seconds), added to the authorization index i at now, the lapsed members dropped first (so a set
-- holds only those of the last expires_in seconds); the set lives (ttl, ms) as long as its latest
-- member.

local function index_authorization(i, m, e, now, ttl)
  redis.call('ZREMRANGEBYSCORE', i, '-inf', now)
  redis.call('ZADD', i, e, m)
  if redis.call('PTTL', i) < tonumber(ttl) then redis.call('PEXPIRE', i, ttl) end
end
