-- oauth_deny_by_index.lua: every live PENDING or APPROVED authorization an index names denied,
-- forgetting who approved what; the index goes with them (a personal agent's or, in the previous
-- layout, a Brand user's authorizations ended).
--
-- KEYS: KEYS[1] an authorization index.
-- ARGV: ARGV[1] now, ARGV[2] the device key prefix (of the index's slot: the devices it names are
-- reached from it).
-- Returns: how many were denied.
-- Why one script: the index is read and its authorizations denied in one step, so none approved
-- meanwhile slips between the read and the denial and is redeemed after.

local denied = 0
for _, hash in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf')) do
  local key = ARGV[2] .. hash
  local v = redis.call('HMGET', key, 't', 'e')
  if (v[1] == 'pending' or v[1] == 'approved') and tonumber(v[2]) > tonumber(ARGV[1]) then
    redis.call('HSET', key, 't', 'denied')
    redis.call('HDEL', key, 'u', 'a', 'x', 'd', 'aa', 'ak')
    denied = denied + 1
  end
end
redis.call('DEL', KEYS[1])
return denied
