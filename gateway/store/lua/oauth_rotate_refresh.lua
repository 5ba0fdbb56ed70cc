-- oauth_rotate_refresh.lua: a refresh token rotated (RFC 9700 §4.14.2): the current token rotates;
-- the previous one within its rotation's grace gets that rotation's answer; any other of the family
-- revokes the grant.
--
-- KEYS: KEYS[1] the grant the presented token names and KEYS[2] its grace key or, for a previous
-- release's token (ARGV[3] ''), its 'refresh' key alone (no placeholder: a cluster checks every key
-- named).
-- ARGV: ARGV[1] now, ARGV[2] previous grant key prefix, ARGV[3] presented family hash, ARGV[4]
-- presented hash, ARGV[5] new family hash, ARGV[6] new hash, ARGV[7] previous grace key prefix,
-- ARGV[8] sealed answer ('' for no grace), ARGV[9] its deadline, ARGV[10] its ttl ms, ARGV[11] the
-- grant id ('' for a previous release's token).
-- Returns: {'rotated', grant id, owner, client, user, scopes, issued, expires, carried, RFC 9396
-- details, carried details} ('' for a grant written before details existed);
-- {'retried', the sealed answer}; {'reused'} (the grant revoked); {'invalid'}.
-- Why one script: the token is checked and replaced in one step, so two refreshes with one token
-- cannot both rotate it, and a reuse revokes the grant before any other use of the family.

local key, grace, id = KEYS[1], KEYS[2], ARGV[11]
if ARGV[3] == '' then
  -- The previous release's tokens name its grants, whose ids and keys are the previous layout's.
  id = redis.call('GET', KEYS[1])
  if not id then return {'invalid'} end
  key, grace = ARGV[2] .. id, ARGV[7] .. id
end
local g = redis.call('HMGET', key, 'r', 'e', 'f', 'o', 'c', 'u', 's', 'i', 'k', 'p', 'ad', 'ak')
if not g[2] or tonumber(g[2]) <= tonumber(ARGV[1]) then return {'invalid'} end
if ARGV[3] ~= '' and g[3] ~= ARGV[3] then return {'invalid'} end
if g[1] ~= ARGV[4] then
  if g[10] == ARGV[4] then
    local kept = redis.call('HMGET', grace, 'p', 'e', 'b')
    if kept[1] == ARGV[4] and tonumber(kept[2]) > tonumber(ARGV[1]) then return {'retried', kept[3]} end
  end
  redis.call('DEL', key, grace)
  return {'reused'}
end
redis.call('HSET', key, 'f', ARGV[5], 'r', ARGV[6], 'p', ARGV[4])
redis.call('DEL', grace)
if ARGV[8] ~= '' then
  redis.call('HSET', grace, 'p', ARGV[4], 'e', ARGV[9], 'b', ARGV[8])
  redis.call('PEXPIRE', grace, ARGV[10])
end
return {'rotated', id, g[4], g[5], g[6], g[7], g[8], g[2], g[9] or '', g[11] or '', g[12] or ''}
