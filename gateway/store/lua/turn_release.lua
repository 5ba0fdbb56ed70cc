-- turn_release.lua: a turn's claim released (its in-flight marker removed), when the turn failed or
-- its begin-turn script's outcome is unknown; a new conversation's claim takes the conversation and
-- its first-message record with it.
-- After: lib/no_key.lua
--
-- KEYS: KEYS[1] conversation, KEYS[2] first-message key, KEYS[3] released claim, KEYS[4] the
-- conversation in the other current layout ('' where not read; see turn_complete.lua).
-- ARGV: ARGV[1] owner (raw), ARGV[2] field, ARGV[3] new flag, ARGV[4] context id, ARGV[5] token (''
-- for the marker, whoever set it), ARGV[6] pending_ttl_s, ARGV[7] the latest marker deadline (ms)
-- released ('' for any): a release by messageId alone, sent late, must not remove the marker of a
-- claim made after its own lapsed (RedisStore.abort_turn).
-- Returns: 1 when a marker was released; 0 when there was none to release (not the owner's, a
-- stored reply, another token's marker, or a later claim's).
-- Why one script: the token is marked released first, so a begin-turn script carrying it that
-- reaches Redis only after this one claims nothing (lib/charge_first.lua); and the marker is checked
-- and removed in one step, so a claim made meanwhile is never removed. Only an in-flight marker is
-- released: a stored reply (a completion that did reach Redis) stays. A first-message record is its
-- text digest (FIRST_DIGEST bytes) and context id.

if ARGV[5] ~= '' then redis.call('SET', KEYS[3], '1', 'EX', ARGV[6]) end
local key = KEYS[1]
if KEYS[4] ~= '' and redis.call('EXISTS', key) == 0 then key = KEYS[4] end
local v = redis.call('HMGET', key, 'o', ARGV[2])
if v[1] ~= ARGV[1] or not v[2] or string.sub(v[2], 1, 1) ~= 'P' then return 0 end
if ARGV[5] ~= '' and string.match(v[2], '|(.*)$') ~= ARGV[5] then return 0 end
if ARGV[7] ~= '' and tonumber(string.match(v[2], '^P(%d+)')) > tonumber(ARGV[7]) then return 0 end
if ARGV[3] == '1' then
  redis.call('DEL', key)
  local earlier = redis.call('GET', KEYS[2])
  if earlier and string.sub(earlier, 9) == ARGV[4] then redis.call('DEL', KEYS[2]) end
else
  redis.call('HDEL', key, ARGV[2])
end
return 1
