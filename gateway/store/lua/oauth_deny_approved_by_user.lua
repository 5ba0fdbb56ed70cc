-- oauth_deny_approved_by_user.lua: the tagged layout's denial of a Brand user's approvals, one owner
-- slot at a time: the devices of that slot live and APPROVED by that user denied (an index entry is
-- written before its approval, so it may name one the user never approved).
--
-- KEYS: devices of one owner slot.
-- ARGV: ARGV[1] now, ARGV[2] the user's digest.
-- Returns: how many were denied.
-- Why one script: each device's status and approver are checked and changed in one step, so a poll
-- cannot redeem an approval while it is being denied.

local denied = 0
for _, key in ipairs(KEYS) do
  local v = redis.call('HMGET', key, 't', 'e', 'd')
  if v[1] == 'approved' and v[3] == ARGV[2] and tonumber(v[2]) > tonumber(ARGV[1]) then
    redis.call('HSET', key, 't', 'denied')
    redis.call('HDEL', key, 'u', 'a', 'x', 'd', 'aa', 'ak')
    denied = denied + 1
  end
end
return denied
