-- lib/reply.lua: put_reply(key, field, value) and get_reply(key, field, first), a stored reply
-- (gateway/store/replies.py) in a conversation's hash. One longer than a listpack value
-- (hash-max-listpack-value, 64 by default) would turn the whole hash into a hash table, about three
-- times its size: up to PIECES pieces it is kept as a first piece '#' .. count .. 62 bytes under the
-- turn's field and the rest 64 bytes at a time under the field and the piece's number. Longer ones
-- are kept whole. get_reply takes the field's value as read (first) and joins the pieces back.

local PIECES = 8
local function put_reply(key, field, value)
  if #value <= 64 or #value > 62 + 64 * (PIECES - 1) then
    redis.call('HSET', key, field, value)
    return
  end
  local n = math.ceil((#value - 62) / 64) + 1
  local args = {field, '#' .. string.char(n) .. string.sub(value, 1, 62)}
  for i = 1, n - 1 do
    args[#args + 1] = field .. string.char(i)
    args[#args + 1] = string.sub(value, 63 + 64 * (i - 1), 62 + 64 * i)
  end
  redis.call('HSET', key, unpack(args))
end
local function get_reply(key, field, first)
  if string.sub(first, 1, 1) ~= '#' then return first end
  local parts = {string.sub(first, 3)}
  for i = 1, string.byte(first, 2) - 1 do
    parts[i + 1] = redis.call('HGET', key, field .. string.char(i))
  end
  return table.concat(parts)
end
