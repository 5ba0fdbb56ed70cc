-- oauth_settle_authorization.lua: a live PENDING device authorization approved or denied (the consent
-- page's answer), and in the previous layout an approval added to the user's index.
-- After: lib/index_authorization.lua
--
-- KEYS: KEYS[1] device and, for an approval in the previous layout, KEYS[2] the user's authorization
-- index.
-- ARGV: ARGV[1] now, ARGV[2] the device hash to index ('' for none), then the fields and values a
-- live PENDING authorization takes.
-- Returns: 1 once settled; 0 when it is no longer live and PENDING; -1 when there is no such device
-- (in this layout: the caller looks in the other).
-- Why one script: the status is checked and changed in one step, so two answers (an approval and a
-- denial, or two approvals) cannot both settle one authorization.

local v = redis.call('HMGET', KEYS[1], 't', 'e')
if not v[1] then return -1 end
local now = tonumber(ARGV[1])
if v[1] ~= 'pending' or tonumber(v[2]) <= now then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
if ARGV[2] ~= '' then
  index_authorization(KEYS[2], ARGV[2], v[2], ARGV[1], math.ceil((tonumber(v[2]) - now) * 1000))
end
return 1
