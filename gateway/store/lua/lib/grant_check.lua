-- lib/grant_check.lua: grant_revoked(g, owner, now_ms), §5.5, right after the limits: the grant at key
-- g must be live (its 'e', seconds, after now_ms) and belong to owner (hex, as
-- gateway/store/oauth_redis.py keeps it). A delegated turn passes its grant's key, any other ''
-- (nothing to check).

local function grant_revoked(g, owner, now_ms)
  if g == '' then return false end
  local v = redis.call('HMGET', g, 'o', 'e')
  return v[1] ~= owner or tonumber(v[2]) * 1000 <= tonumber(now_ms)
end
