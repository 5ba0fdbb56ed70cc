"""Listing, closing and erasing an owner's conversations on Redis, over the store's own connection.

Each is a Lua script, so it is one atomic step against every replica's turns: the listing (one
script for the owner, which counts turns inside Redis, so no reply crosses the wire), a close,
and an erasure (one script per conversation, all sent at once with the deletions of the adapters'
state and the person's §6 counters: one round trip whatever their number). Every script's keys
are its owner's (under their hash tag in the tagged layout): one slot per script. Key layouts
are :mod:`gateway.store.redis`'s; the scripts reach the first-message records of a conversation's
messages by their key prefix, as :mod:`gateway.store.oauth_redis` does for keys it learns only as
it runs: in the tagged layout that prefix carries the owner's tag, so those keys are in the
script's slot too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from gateway.config import CacheConfig
from gateway.store import keys
from gateway.store.admin import ConversationAdmin, ConversationInfo, Erased
from gateway.store.base import Owner
from gateway.store.redis import INDEX_SLACK_MS, RedisStore
from gateway.store.redis_pipe import Script
from gateway.store.slots import NO_KEY_LUA

__all__ = ["RedisConversationAdmin"]

# Every layout is read (see gateway/store/redis.py): the two current ones (tagged and the previous
# release's), whose turn fields are 8-byte message digests, and the older one, whose turn fields are
# 'm:' and the message id, for the conversations it wrote that no turn has moved since. Counts a
# conversation's turns into `replies` and `running` (live in-flight markers) as it walks its fields;
# calls each_turn(what the message's first-message key ends with, whether in the older layout) on
# every turn.
_TURNS_LUA = """
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
"""

# KEYS[1] owner index in the written layout, KEYS[2] in the other current one, KEYS[3] in the older
# one ("" where not read). ARGV: owner (raw), owner (hex), the three layouts' conversation key
# prefixes in the same order ("" where not read), now ms, idle ms, pruning horizon ms. Per
# conversation of the owner, in index order: {context id, opened ms or '', closed 0/1, replies,
# running}, each once whichever layouts list it. Members past the horizon, gone, not the owner's (a
# tombstone) or already listed from an earlier index (a conversation moved since) leave the index.
_LIST = Script(
    NO_KEY_LUA
    + _TURNS_LUA
    + """
local now = tonumber(ARGV[6])
local found, seen = {}, {}
local function find(context)
  for i = 3, 4 do
    if ARGV[i] ~= '' then
      local key = ARGV[i] .. context
      local v = redis.call('HMGET', key, 'o', 'c', 't', 'l')
      if v[1] == ARGV[1] then return key, v, tonumber(v[3]), tonumber(v[3]) + tonumber(v[4]) end
    end
  end
  if ARGV[5] ~= '' then
    local key = ARGV[5] .. context
    local v = redis.call('HMGET', key, 'o', 'c', 't', 'l')
    if v[1] == ARGV[2] then return key, v, tonumber(v[3]), tonumber(v[4]) end
  end
end
local function add(context)
  if seen[context] then return false end
  local key, v, opened, last = find(context)
  if not key then return false end
  seen[context] = true
  local replies, running = count_turns(key, now)
  local closed = (v[2] == '1' or now - last > tonumber(ARGV[7])) and 1 or 0
  found[#found + 1] = {context, opened or '', closed, replies, running}
  return true
end
for i = 1, 3 do
  if KEYS[i] ~= '' then
    local horizon = tonumber(ARGV[8])
    if i < 3 then horizon = math.floor(horizon / 1000) end
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', horizon)
    for _, context in ipairs(redis.call('ZRANGE', KEYS[i], 0, -1)) do
      if not add(context) then redis.call('ZREM', KEYS[i], context) end
    end
  end
end
return found
"""
)

# KEYS: the conversation and its owner's index in the written layout, in the other current one and
# in the older one ("" where not read). ARGV: owner (raw), owner (hex), context id, now ms, closed_ttl
# s. As _COMPLETE closes one: flag, TTL, and its deadline in the index (which outlives it already),
# in whichever layout holds it.
_CLOSE = Script(
    NO_KEY_LUA
    + """
local function close(key, index, owner, deadline)
  if key == '' then return false end
  local v = redis.call('HMGET', key, 'o', 'c')
  if v[1] ~= owner then return false end
  if v[2] ~= '1' then
    redis.call('HSET', key, 'c', '1')
    redis.call('EXPIRE', key, ARGV[5])
    redis.call('ZADD', index, deadline, ARGV[3])
  end
  return true
end
local now = tonumber(ARGV[4])
local deadline = math.floor(now / 1000) + tonumber(ARGV[5])
if close(KEYS[1], KEYS[2], ARGV[1], deadline) or close(KEYS[3], KEYS[4], ARGV[1], deadline) then return 1 end
if close(KEYS[5], KEYS[6], ARGV[2], now + tonumber(ARGV[5]) * 1000) then return 1 end
return 0
"""
)

# KEYS as _CLOSE's. ARGV: owner (raw), owner (hex), context id, the owner's first-message key prefix
# in the written layout, in the other current one and in the older one ("" where not read),
# tombstone ttl s, now ms. {replies, running, first-message records} once erased, leaving the
# tombstone (under the written layout's key, which a turn reads first); {} when it is not the
# owner's (or is gone): then it only leaves the indexes. A turn's first-message record may be in
# either current layout (a conversation moves, its records stay), so both are deleted.
_ERASE = Script(
    NO_KEY_LUA
    + _TURNS_LUA
    + """
for i = 2, 6, 2 do
  if KEYS[i] ~= '' then redis.call('ZREM', KEYS[i], ARGV[3]) end
end
local key
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] then
  key = KEYS[1]
elseif KEYS[3] ~= '' and redis.call('HGET', KEYS[3], 'o') == ARGV[1] then
  key = KEYS[3]
elseif KEYS[5] ~= '' and redis.call('HGET', KEYS[5], 'o') == ARGV[2] then
  key = KEYS[5]
else
  return {}
end
local firsts = 0
local replies, running = count_turns(key, tonumber(ARGV[8]), function(message, old)
  for i = 4, 6 do
    if ARGV[i] ~= '' and old == (i == 6) then firsts = firsts + redis.call('DEL', ARGV[i] .. message) end
  end
end)
for i = 1, 5, 2 do
  if KEYS[i] ~= '' then redis.call('DEL', KEYS[i]) end
end
redis.call('HSET', KEYS[1], 'e', '1')
redis.call('EXPIRE', KEYS[1], ARGV[7])
return {replies, running, firsts}
"""
)


class RedisConversationAdmin(ConversationAdmin):
    """The operator's side of a :class:`~gateway.store.redis.RedisStore`, on its connection and clock.

    ``adapter_names`` are the names bot adapters keep per-conversation state under
    (:func:`gateway.store.keys.adapter_key`). Those keys carry no owner tag (an adapter knows the
    conversation, not its owner), so no script touches them: an erasure deletes them with their own
    commands, sent in the same write as the conversations' scripts. Nothing is lost by that: a turn
    running during an erasure may put its adapter state back after either way, and it expires with
    ``conversation_ttl``.
    """

    def __init__(
        self,
        store: RedisStore,
        cache: CacheConfig,
        adapter_names: Sequence[str],
    ) -> None:
        self._store = store
        self._redis = store.redis
        self._cache = cache
        self._adapter_names = tuple(adapter_names)
        self._clock = store.clock

    def _layouts(self, owner: Owner, context_id: str) -> list[str | bytes]:
        """A conversation's key and its owner's index in each layout the store reads ("" if not)."""
        where = self._store.layouts(owner)
        brand, raw = owner.brand_id, owner.digest_bytes
        other = where.other
        return [
            keys.conv_key(brand, context_id, where.tag),
            keys.conv_index_key(brand, raw, where.tag),
            "" if other is None else keys.conv_key(brand, context_id, other),
            b"" if other is None else keys.conv_index_key(brand, raw, other),
            keys.conversation_key(brand, context_id) if where.older else "",
            keys.owner_index_key(brand, owner.digest) if where.older else "",
        ]

    async def _listed(self, owner: Owner) -> list[Any]:
        now_ms = int(self._clock() * 1000)
        where = self._store.layouts(owner)
        brand = owner.brand_id
        found: list[Any] = await self._redis.run(
            _LIST,
            self._layouts(owner, "")[1::2],
            [
                owner.digest_bytes,
                owner.digest,
                keys.conv_key(brand, "", where.tag),
                "" if where.other is None else keys.conv_key(brand, "", where.other),
                keys.conversation_key(brand, "") if where.older else "",
                now_ms,
                self._cache.conversation_ttl * 1000,
                now_ms - INDEX_SLACK_MS,
            ],
        )
        return found

    async def conversations(self, owner: Owner) -> list[ConversationInfo]:
        found = [
            ConversationInfo(
                context_id=context.decode(),
                opened_at=int(opened) / 1000 if opened else None,
                turns=int(replies),
                in_flight=int(running),
                closed=bool(closed),
            )
            for context, opened, closed, replies, running in await self._listed(owner)
        ]
        return sorted(found, key=lambda info: (info.opened_at or 0.0, info.context_id))

    async def close(self, owner: Owner, context_id: str) -> bool:
        closed = await self._redis.run(
            _CLOSE,
            self._layouts(owner, context_id),
            [owner.digest_bytes, owner.digest, context_id, int(self._clock() * 1000), self._cache.closed_ttl],
            replicated=True,
        )
        return bool(closed)

    async def erase(self, owner: Owner, counters: Sequence[str]) -> Erased:
        now_ms = int(self._clock() * 1000)
        indexes = [index for index in self._layouts(owner, "")[1::2] if index]
        listed: list[list[bytes]] = await asyncio.gather(
            *(self._redis.execute("ZRANGE", index, 0, -1) for index in indexes)
        )
        members = sorted({member.decode() for found in listed for member in found})
        # Sent together, so the pipe writes them as one batch: one round trip for all of them. One
        # command per key: a cluster routes each to its own slot.
        answers: list[Any] = await asyncio.gather(
            *(self._erase_one(owner, member, now_ms) for member in members),
            *(
                self._redis.execute("DEL", keys.adapter_key(owner.brand_id, member, name), replicated=True)
                for member in members
                for name in self._adapter_names
            ),
            *(self._redis.execute("DEL", counter, replicated=True) for counter in counters),
        )
        results: list[list[Any]] = answers[: len(members)]
        states: list[int] = answers[len(members) :]
        erased = [result for result in results if result]
        adapter_states = len(members) * len(self._adapter_names)
        return Erased(
            conversations=len(erased),
            replies=sum(int(result[0]) for result in erased),
            in_flight=sum(int(result[1]) for result in erased),
            retry_records=sum(int(result[2]) for result in erased),
            adapter_states=sum(states[:adapter_states]),
            counters=sum(states[adapter_states:]),
        )

    async def _erase_one(self, owner: Owner, context_id: str, now_ms: int) -> list[Any]:
        where = self._store.layouts(owner)
        brand, raw = owner.brand_id, owner.digest_bytes
        result: list[Any] = await self._redis.run(
            _ERASE,
            self._layouts(owner, context_id),
            [
                raw,
                owner.digest,
                context_id,
                keys.first_key(brand, raw, b"", where.tag),
                b"" if where.other is None else keys.first_key(brand, raw, b"", where.other),
                keys.first_message_key(brand, owner.digest, "") if where.older else "",
                self._cache.pending_ttl,
                now_ms,
            ],
            replicated=True,
        )
        return result
