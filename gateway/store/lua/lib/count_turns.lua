-- lib/count_turns.lua: count_turns(key, now, each_turn), a conversation's turns counted as its fields
-- are walked: replies (stored) and running (live in-flight markers). Every layout is read (see
-- gateway/store/redis.py): the two current ones, whose turn fields are 8-byte message digests, and
-- the older one, whose turn fields are 'm:' and the message id, for the conversations it wrote that
-- no turn has moved since. Calls each_turn(what the message's first-message key ends with, whether in
-- the older layout) on every turn, if given.

local function count_turns(key, now, each_turn)
  local replies, running = 0, 0
  local fields = redis.call('HGETALL', key)
  for i = 1, #fields, 2 do
    local name = fields[i]
    local old = string.sub(name, 1, 2) == 'm:'
    if old or #name == 8 then
      local value = fields[i + 1]
      if string.sub(value, 1, 1) ~= 'P' then
        replies = replies + 1
      elseif tonumber(string.match(value, '^P(%d+)')) > now then
        running = running + 1
      end
      if each_turn then each_turn(old and string.sub(name, 3) or name, old) end
    end
  end
  return replies, running
end
