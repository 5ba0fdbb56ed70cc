-- turn_complete.lua: a turn's reply stored (§4.3: what a retry of its message replays) and its
-- conversation's fields kept (answered, closed if asked, last turn's time), its TTL and its place in
-- the owner's index renewed.
-- After: lib/no_key.lua lib/reply.lua
--
-- KEYS: KEYS[1] conversation, KEYS[2] owner index, KEYS[3] and KEYS[4] the same in the other current
-- layout ('' where not read): a replica writing that layout may have moved the conversation there
-- while this turn ran, and its reply belongs with it.
-- ARGV: ARGV[1] owner (raw), ARGV[2] field, ARGV[3] stored reply, ARGV[4] now_ms, ARGV[5] close flag,
-- ARGV[6] ttl_s, ARGV[7] context id.
-- Returns: 1 once stored; 0 over an erased conversation's tombstone (nothing is stored there).
-- Why one script: the tombstone check and the writes are one step, so an erasure cannot come between
-- them and be undone; the reply and the fields that say it was answered change together. The index
-- is kept as long as this conversation now is, unless that is shorter (a close): then it still holds
-- a longer one.

local key, index = KEYS[1], KEYS[2]
if KEYS[3] ~= '' and redis.call('EXISTS', key) == 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  key, index = KEYS[3], KEYS[4]
end
if redis.call('HEXISTS', key, 'e') == 1 then return 0 end
local now_ms = tonumber(ARGV[4])
local opened = tonumber(redis.call('HGET', key, 't')) or now_ms
put_reply(key, ARGV[2], ARGV[3])
redis.call('HSET', key, 'o', ARGV[1], 't', opened, 'l', now_ms - opened, 'a', '1')
if ARGV[5] == '1' then redis.call('HSET', key, 'c', '1') end
redis.call('EXPIRE', key, ARGV[6])
redis.call('ZADD', index, math.floor(now_ms / 1000) + tonumber(ARGV[6]), ARGV[7])
if ARGV[5] ~= '1' or redis.call('TTL', index) < 0 then redis.call('EXPIRE', index, ARGV[6]) end
return 1
