-- admin_erase.lua: a conversation erased (the operator's, or a person's erasure): its hash and its
-- turns' first-message records deleted in every layout, its index entries removed, and a tombstone
-- left under the written layout's key (which a turn reads first), over which a turn still running
-- stores nothing (turn_complete.lua).
-- After: lib/no_key.lua lib/count_turns.lua
--
-- KEYS: as admin_close.lua's.
-- ARGV: ARGV[1] owner (raw), ARGV[2] owner (hex), ARGV[3] context id, ARGV[4..6] the owner's
-- first-message key prefix in the written layout, in the other current one and in the older one (''
-- where not read), ARGV[7] tombstone ttl s, ARGV[8] now ms. A turn's first-message record may be in
-- either current layout (a conversation moves, its records stay), so both are deleted.
-- Returns: {replies, running, first-message records} once erased; {} when it is not the owner's (or
-- is gone): then it only leaves the indexes.
-- Why one script: the conversation, its records and its tombstone go in one step, so no turn stores
-- a reply between the deletion and the tombstone, and the counts are of what was erased.

for i = 2, 6, 2 do
  if KEYS[i] ~= '' then redis.call('ZREM', KEYS[i], ARGV[3]) end
end
local key
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] then
  key = KEYS[1]
elseif KEYS[3] ~= '' and redis.call('HGET', KEYS[3], 'o') == ARGV[1] then
  key = KEYS[3]
elseif KEYS[5] ~= '' and redis.call('HGET', KEYS[5], 'o') == ARGV[2] then
  key = KEYS[5]
else
  return {}
end
local firsts = 0
local replies, running = count_turns(key, tonumber(ARGV[8]), function(message, old)
  for i = 4, 6 do
    if ARGV[i] ~= '' and old == (i == 6) then firsts = firsts + redis.call('DEL', ARGV[i] .. message) end
  end
end)
for i = 1, 5, 2 do
  if KEYS[i] ~= '' then redis.call('DEL', KEYS[i]) end
end
redis.call('HSET', KEYS[1], 'e', '1')
redis.call('EXPIRE', KEYS[1], ARGV[7])
return {replies, running, firsts}
