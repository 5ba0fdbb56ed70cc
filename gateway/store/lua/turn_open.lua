-- turn_open.lua: a first message's turn begun (no contextId): §6 limits charged, §5.5 grant checked,
-- §4.3 first-message record checked and written, the conversation opened with the turn's in-flight
-- marker, and its owner's index kept.
-- After: lib/no_key.lua lib/clock.lua lib/gcra.lua lib/charge_first.lua lib/grant_check.lua lib/upgrade.lua
--
-- KEYS, after the §6 counters: K[1] conversation, K[2] first-message key ('' to skip the retry
-- check), K[3] grant ('' if none), K[4] owner index, K[5] the older release's first-message key (''
-- where not read), K[6] the other current layout's first-message key ('' where not read), K[7]
-- released claim (last, as lib/charge_first.lua reads it).
-- ARGV, after the counters': A[1] owner (raw), A[2] owner (hex), A[3] field, A[4] now_ms, A[5]
-- pending_deadline_ms, A[6] record_ttl_s, A[7] retry_window_s, A[8] first_value, A[9] user (raw, ''
-- if none), A[10] the first-message value this open takes over ('' if none), A[11] context id, A[12]
-- index pruning horizon s, A[13] token.
-- Returns: {'new'}; {'first', the earlier record} when the message was first sent before (its text
-- digest and context id); {'revoked'}; {'limited', wait µs per limit}; {'released'}.
-- Why one script: two replicas given the same first message must not both open a conversation for
-- it (the record is checked and set in the same step as the claim), and a refused charge or a
-- revoked grant claims nothing; it is also the turn's one round trip. No other conversation of the
-- index outlives this one, so the index is kept exactly as long; members whose deadline is past the
-- horizon go.

if grant_revoked(K[3], A[2], A[4]) then return {'revoked'} end
if K[2] ~= '' then
  local earlier = redis.call('GET', K[2])
  if not earlier and K[6] ~= '' then earlier = redis.call('GET', K[6]) end
  if not earlier and K[5] ~= '' then earlier = old_first(redis.call('GET', K[5])) end
  if earlier and earlier ~= A[10] then return {'first', earlier} end
  redis.call('SET', K[2], A[8], 'EX', A[7])
end
redis.call('HSET', K[1], 'o', A[1], 't', A[4], 'l', 0, A[3], marker(A[5]))
if A[9] ~= '' then redis.call('HSET', K[1], 'u', A[9]) end
redis.call('EXPIRE', K[1], A[6])
redis.call('ZREMRANGEBYSCORE', K[4], '-inf', A[12])
redis.call('ZADD', K[4], math.floor(tonumber(A[4]) / 1000) + tonumber(A[6]), A[11])
redis.call('EXPIRE', K[4], A[6])
return {'new'}
