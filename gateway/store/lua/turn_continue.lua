-- turn_continue.lua: a turn of a known conversation begun (contextId given): §6 limits charged, §5.5
-- grant checked, the conversation moved into the written layout if found in another, then §4.3
-- (a stored reply replayed, a messageId still running refused) before §4.2 (closed or idle), and
-- the turn's in-flight marker set.
-- After: lib/no_key.lua lib/clock.lua lib/gcra.lua lib/charge_first.lua lib/grant_check.lua
-- After: lib/reply.lua lib/upgrade.lua lib/move.lua
--
-- KEYS, after the §6 counters: K[1] conversation, K[2] grant ('' if none), K[3] the older release's
-- conversation key ('' where not read), K[4] owner index, K[5] and K[6] the conversation and owner
-- index in the other current layout ('' where not read), K[7] released claim (last, as
-- lib/charge_first.lua reads it).
-- ARGV, after the counters': A[1] owner (raw), A[2] owner (hex), A[3] field, A[4] now_ms, A[5]
-- pending_deadline_ms, A[6] idle_ttl_ms, A[7] user (raw, '' if none), A[8] context id, A[9] and
-- A[10] the owner's first-message key prefix in the older release's layout and in the written one,
-- A[11] token.
-- Returns: {'new', '1' once a turn was answered}; {'replay', the stored reply}; {'in_flight'};
-- {'closed'}; {'unknown'} (no such conversation of this owner); {'mismatch'} (another Brand user's);
-- {'revoked'}; {'limited', wait µs per limit}; {'released'}.
-- Why one script: the replay, the in-flight check and the claim read and write one turn's field, so
-- two replicas given the same message cannot both claim it, and nothing is claimed past a refused
-- charge or a revoked grant; it is also the turn's one round trip.

if grant_revoked(K[2], A[2], A[4]) then return {'revoked'} end
if redis.call('EXISTS', K[1]) == 0 then
  if K[5] ~= '' and redis.call('EXISTS', K[5]) == 1 then
    move(K[5], K[6], K[1], K[4], A[8], A[1], A[4])
  elseif K[3] ~= '' then
    upgrade(K[3], K[1], K[4], A[8], A[2], A[4], A[9], A[10])
  end
end
local v = redis.call('HMGET', K[1], 'o', 'c', 't', 'l', A[3], 'a', 'u')
if not v[1] or v[1] ~= A[1] then return {'unknown'} end
-- Before the replay: a stored reply is the context's user's, served to no one else.
if A[7] ~= '' and v[7] and v[7] ~= A[7] then return {'mismatch'} end
local turn = v[5]
if turn and string.sub(turn, 1, 1) ~= 'P' then return {'replay', get_reply(K[1], A[3], turn)} end
-- §4.3 before §4.2: a messageId still running is a repeat with no reply yet, even once closed.
if turn and tonumber(string.match(turn, '^P(%d+)')) > tonumber(A[4]) then return {'in_flight'} end
local last = tonumber(v[3]) + tonumber(v[4])
if v[2] == '1' or tonumber(A[4]) - last > tonumber(A[6]) then return {'closed'} end
redis.call('HSET', K[1], A[3], marker(A[5]))
if A[7] ~= '' and not v[7] then redis.call('HSET', K[1], 'u', A[7]) end
return {'new', v[6]}
