-- admin_close.lua: a conversation closed by the operator, in whichever layout holds it, as
-- turn_complete.lua closes one: flag, TTL, and its deadline in the index (which outlives it already).
-- After: lib/no_key.lua
--
-- KEYS: the conversation and its owner's index in the written layout, in the other current one and
-- in the older one ('' where not read).
-- ARGV: ARGV[1] owner (raw), ARGV[2] owner (hex), ARGV[3] context id, ARGV[4] now ms, ARGV[5]
-- closed_ttl s.
-- Returns: 1 when the owner's conversation was found (closed now or already); 0 otherwise.
-- Why one script: the owner is checked and the conversation closed in one step, so a turn cannot
-- reopen what it read as open, nor a conversation moved meanwhile be missed.

local function close(key, index, owner, deadline)
  if key == '' then return false end
  local v = redis.call('HMGET', key, 'o', 'c')
  if v[1] ~= owner then return false end
  if v[2] ~= '1' then
    redis.call('HSET', key, 'c', '1')
    redis.call('EXPIRE', key, ARGV[5])
    redis.call('ZADD', index, deadline, ARGV[3])
  end
  return true
end
local now = tonumber(ARGV[4])
local deadline = math.floor(now / 1000) + tonumber(ARGV[5])
if close(KEYS[1], KEYS[2], ARGV[1], deadline) or close(KEYS[3], KEYS[4], ARGV[1], deadline) then return 1 end
if close(KEYS[5], KEYS[6], ARGV[2], now + tonumber(ARGV[5]) * 1000) then return 1 end
return 0
