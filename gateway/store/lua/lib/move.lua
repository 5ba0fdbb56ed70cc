-- lib/move.lua: move(from, from_index, to, to_index, context, owner, now_ms), the conversation FROM (in
-- the other of the two current layouts, same fields) moved to TO if it is OWNER's (raw), with its
-- member of FROM_INDEX into TO_INDEX (score kept): a rename, since both layouts lay the hash out
-- alike. Its first-message records stay where they are: a retry and an erasure read both layouts'
-- (a record lives only the retry window).

local function move(from, from_index, to, to_index, context, owner, now_ms)
  local ttl = redis.call('PTTL', from)
  if ttl < 0 or redis.call('HGET', from, 'o') ~= owner then return end
  redis.call('RENAME', from, to)
  local ttl_s = math.ceil(ttl / 1000)
  local score = redis.call('ZSCORE', from_index, context)
  redis.call('ZREM', from_index, context)
  redis.call('ZADD', to_index, score or (math.floor(tonumber(now_ms) / 1000) + ttl_s), context)
  if redis.call('TTL', to_index) < ttl_s then redis.call('EXPIRE', to_index, ttl_s) end
end
