-- lib/upgrade.lua: upgrade(...), the older release's layout (b17dd54: 'conv:', 'owner:' and 'first:'
-- keys, hex digests, ms, 'm:{messageId}' fields) read and moved into the written one, with the
-- first-message records of its turns; and old_first(value), such a record read in this layout
-- (gateway/store/redis.py, the module docstring, says which layouts are read).

local function raw(hex)
  return (string.gsub(hex, '%x%x', function(c) return string.char(tonumber(c, 16)) end))
end
-- A first-message record as the previous release kept it ("context|digest hex"), in this layout
-- (FIRST_DIGEST bytes of the digest).
local function old_first(value)
  if not value then return nil end
  local context, digest = string.match(value, '^(.*)|(%x+)$')
  return raw(string.sub(digest, 1, 16)) .. context
end
-- Moves the previous release's conversation OLD (if it is OWNER's, hex) to NEW, and into INDEX; and
-- the first-message records of its turns, from the prefix OLD_FIRST to NEW_FIRST (so an erasure,
-- which finds them by the conversation's turns, still finds them).
local function upgrade(old, new, index, context, owner, now_ms, old_first_prefix, new_first_prefix)
  local ttl = redis.call('PTTL', old)
  if ttl < 0 or redis.call('HGET', old, 'o') ~= owner then return end
  local f = redis.call('HGETALL', old)
  local v, out = {}, {}
  for i = 1, #f, 2 do
    local name, value = f[i], f[i + 1]
    if string.sub(name, 1, 2) == 'm:' then
      local message = raw(string.sub(redis.sha1hex(string.sub(name, 3)), 1, 16))
      out[#out + 1] = message
      out[#out + 1] = value
      local record = old_first_prefix .. string.sub(name, 3)
      local first = redis.call('GET', record)
      if first and string.sub(first, 1, #context + 1) == context .. '|' then
        redis.call('SET', new_first_prefix .. message, old_first(first), 'PX', redis.call('PTTL', record))
        redis.call('DEL', record)
      end
    else
      v[name] = value
    end
  end
  local last = tonumber(v.l)
  local opened = tonumber(v.t or v.l)
  out[#out + 1] = 'o'
  out[#out + 1] = raw(v.o)
  out[#out + 1] = 't'
  out[#out + 1] = opened
  out[#out + 1] = 'l'
  out[#out + 1] = last - opened
  for _, flag in ipairs({'c', 'a'}) do
    if v[flag] == '1' then
      out[#out + 1] = flag
      out[#out + 1] = '1'
    end
  end
  if v.u then
    out[#out + 1] = 'u'
    out[#out + 1] = raw(v.u)
  end
  redis.call('HSET', new, unpack(out))
  redis.call('PEXPIRE', new, ttl)
  redis.call('DEL', old)
  local ttl_s = math.ceil(ttl / 1000)
  redis.call('ZADD', index, math.floor(tonumber(now_ms) / 1000) + ttl_s, context)
  if redis.call('TTL', index) < ttl_s then redis.call('EXPIRE', index, ttl_s) end
end
