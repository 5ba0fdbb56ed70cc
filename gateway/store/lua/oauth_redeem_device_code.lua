-- oauth_redeem_device_code.lua: a device-code poll (RFC 8628 §3.4, §3.5): pending, slow_down, denied,
-- expired, or, once approved, the code redeemed into a grant that supersedes the (user, owner)'s
-- live one in either layout, carrying only the scopes that one still holds.
--
-- KEYS: KEYS[1] device, KEYS[2] grant, KEYS[3] the owner's grant set.
-- ARGV: ARGV[1] owner, ARGV[2] now, ARGV[3] refresh hash, ARGV[4] grant expires, ARGV[5] grant ttl
-- ms, ARGV[6] grant id, ARGV[7] family hash, ARGV[8] the Brand's key prefix, ARGV[9] user-set key
-- prefix ('': the caller adds the grant to the user's set), ARGV[10] the slot key prefix, ARGV[11]
-- the other layout's slot key prefix ('': none). The slots and the superseded grant are keys learnt
-- only as it runs, from these prefixes (in the tagged layout, of the owner's slot).
-- Returns: {'issued', client, user, scopes, carried scopes, '1' if a live grant was superseded else
-- '0', the user's digest, RFC 9396 details, carried details}, details (canonical JSON each) joined
-- by newlines, which canonical JSON never holds; {'authorization_pending'}; {'slow_down'}; {'access_denied'};
-- {'expired_token'}; {'invalid_grant'}; {'missing'} when there is no such device in this layout.
-- Why one script: a device code is redeemed once (its status checked and set with the grant
-- written), so two polls racing mint one grant; and the grant it supersedes ends in the same step,
-- so a (user, owner) never holds two.

-- keys.grant_key: 'a2agrant_' (9 characters), the owner's tag (8 hex), 22 random; or the previous id.
local function grant_key(id)
  local tag = string.sub(id, 10, 17)
  if #id == 39 and string.find(tag, '^[0-9a-f]+$') then
    return ARGV[8] .. '{' .. tag .. '}o.g:' .. string.sub(id, 18)
  end
  return ARGV[8] .. 'grant:' .. id
end
local d = redis.call('HMGET', KEYS[1], 'o', 'e', 't', 'p', 'i')
if not d[1] then return {'missing'} end
if d[1] ~= ARGV[1] then return {'invalid_grant'} end
local now = tonumber(ARGV[2])
if tonumber(d[2]) <= now then return {'expired_token'} end
if d[3] == 'denied' then return {'access_denied'} end
if d[3] == 'redeemed' then return {'invalid_grant'} end
local interval = tonumber(d[5])
if d[4] and now - tonumber(d[4]) < interval then
  redis.call('HSET', KEYS[1], 'p', ARGV[2], 'i', interval + 5)
  return {'slow_down'}
end
if d[3] ~= 'approved' then
  redis.call('HSET', KEYS[1], 'p', ARGV[2])
  return {'authorization_pending'}
end
redis.call('HSET', KEYS[1], 'p', ARGV[2], 't', 'redeemed')
local a = redis.call('HMGET', KEYS[1], 'c', 'u', 'a', 'd', 'x', 'aa', 'ak')
local sets = {KEYS[3]}
if ARGV[9] ~= '' then table.insert(sets, ARGV[9] .. a[4]) end
local slot = ARGV[10] .. a[4] .. ARGV[1]
-- Both layouts' slots: whichever names a grant of this (user, owner), it is superseded.
local slots = {slot}
if ARGV[11] ~= '' then table.insert(slots, ARGV[11] .. a[4] .. ARGV[1]) end
local held, held_details, ended = {}, {}, '0'
for _, named in ipairs(slots) do
  local superseded = redis.call('GET', named)
  if superseded then
    local old = redis.call('HMGET', grant_key(superseded), 's', 'e', 'ad')
    if old[2] and tonumber(old[2]) > now then
      for scope in string.gmatch(old[1], '%S+') do held[scope] = true end
      for detail in string.gmatch(old[3] or '', '[^\n]+') do held_details[detail] = true end
      ended = '1'
    end
    redis.call('DEL', grant_key(superseded))
    for _, set in ipairs(sets) do redis.call('SREM', set, superseded) end
  end
end
-- Only what the superseded grant still holds now is carried: one revoked since the approval
-- (or replaced by another) hands nothing on.
local dropped, carried, scopes = {}, {}, {}
for scope in string.gmatch(a[5] or '', '%S+') do
  if held[scope] then table.insert(carried, scope) else dropped[scope] = true end
end
for scope in string.gmatch(a[3], '%S+') do
  if not dropped[scope] then table.insert(scopes, scope) end
end
scopes, carried = table.concat(scopes, ' '), table.concat(carried, ' ')
-- RFC 9396 details by the same rule.
local dropped_details, carried_details, details = {}, {}, {}
for detail in string.gmatch(a[7] or '', '[^\n]+') do
  if held_details[detail] then table.insert(carried_details, detail) else dropped_details[detail] = true end
end
for detail in string.gmatch(a[6] or '', '[^\n]+') do
  if not dropped_details[detail] then table.insert(details, detail) end
end
details, carried_details = table.concat(details, '\n'), table.concat(carried_details, '\n')
redis.call('HSET', KEYS[2], 'o', ARGV[1], 'c', a[1], 'u', a[2], 's', scopes, 'i', ARGV[2], 'e', ARGV[4],
  'f', ARGV[7], 'r', ARGV[3])
if carried ~= '' then redis.call('HSET', KEYS[2], 'k', carried) end
if details ~= '' then redis.call('HSET', KEYS[2], 'ad', details) end
if carried_details ~= '' then redis.call('HSET', KEYS[2], 'ak', carried_details) end
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('SET', slot, ARGV[6], 'PX', ARGV[5])
for _, set in ipairs(sets) do
  redis.call('SADD', set, ARGV[6])
  if redis.call('PTTL', set) < tonumber(ARGV[5]) then redis.call('PEXPIRE', set, ARGV[5]) end
end
return {'issued', a[1], a[2], scopes, carried, ended, a[4], details, carried_details}
