-- oauth_use_once.lua: a marker used once (a token's jti, say) until its deadline.
--
-- KEYS: KEYS[1] marker.
-- ARGV: ARGV[1] now, ARGV[2] its deadline, ARGV[3] ttl ms.
-- Returns: 1 the first time; 0 while a use before it is live.
-- Why one script: checked and set in one step, so of two replicas given the same marker one wins.

local until_ = redis.call('GET', KEYS[1])
if until_ and tonumber(until_) > tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
