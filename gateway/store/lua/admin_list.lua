-- admin_list.lua: an owner's conversations listed for the operator (gateway/store/admin.py), with
-- their turns counted inside Redis, so no reply crosses the wire; the owner's indexes pruned on the
-- way.
-- After: lib/no_key.lua lib/count_turns.lua
--
-- KEYS: KEYS[1] owner index in the written layout, KEYS[2] in the other current one, KEYS[3] in the
-- older one ('' where not read).
-- ARGV: ARGV[1] owner (raw), ARGV[2] owner (hex), ARGV[3..5] the three layouts' conversation key
-- prefixes in the same order ('' where not read), ARGV[6] now ms, ARGV[7] idle ms, ARGV[8] pruning
-- horizon ms.
-- Returns: per conversation of the owner, in index order, {context id, opened ms or '', closed 0/1,
-- replies, running}, each once whichever layouts list it. Members past the horizon, gone, not the
-- owner's (a tombstone) or already listed from an earlier index (a conversation moved since) leave
-- the index.
-- Why one script: one consistent view of the owner's conversations against every replica's turns
-- (none half moved between layouts), and the pruning decided on what was read.

local now = tonumber(ARGV[6])
local found, seen = {}, {}
local function find(context)
  for i = 3, 4 do
    if ARGV[i] ~= '' then
      local key = ARGV[i] .. context
      local v = redis.call('HMGET', key, 'o', 'c', 't', 'l')
      if v[1] == ARGV[1] then return key, v, tonumber(v[3]), tonumber(v[3]) + tonumber(v[4]) end
    end
  end
  if ARGV[5] ~= '' then
    local key = ARGV[5] .. context
    local v = redis.call('HMGET', key, 'o', 'c', 't', 'l')
    if v[1] == ARGV[2] then return key, v, tonumber(v[3]), tonumber(v[4]) end
  end
end
local function add(context)
  if seen[context] then return false end
  local key, v, opened, last = find(context)
  if not key then return false end
  seen[context] = true
  local replies, running = count_turns(key, now)
  local closed = (v[2] == '1' or now - last > tonumber(ARGV[7])) and 1 or 0
  found[#found + 1] = {context, opened or '', closed, replies, running}
  return true
end
for i = 1, 3 do
  if KEYS[i] ~= '' then
    local horizon = tonumber(ARGV[8])
    if i < 3 then horizon = math.floor(horizon / 1000) end
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', horizon)
    for _, context in ipairs(redis.call('ZRANGE', KEYS[i], 0, -1)) do
      if not add(context) then redis.call('ZREM', KEYS[i], context) end
    end
  end
end
return found
