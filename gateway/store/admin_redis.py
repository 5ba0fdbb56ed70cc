"""Listing, closing and erasing an owner's conversations on Redis, over the store's own connection.

Each is a Lua script, so it is one atomic step against every replica's turns: the listing (one
script for the owner, which counts turns inside Redis, so no reply crosses the wire), a close,
and an erasure (one script per conversation, all sent at once: one round trip whatever their
number). Key layouts are :mod:`gateway.store.redis`'s; the scripts reach the first-message
records of a conversation's messages by their key prefix, as :mod:`gateway.store.oauth_redis`
does for keys it learns only as it runs (a standalone Redis, like every key here).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from gateway.config import CacheConfig
from gateway.store import keys
from gateway.store.admin import ConversationAdmin, ConversationInfo, Erased
from gateway.store.base import Owner
from gateway.store.redis import INDEX_SLACK_MS
from gateway.store.redis_pipe import RedisPipe, Script

__all__ = ["RedisConversationAdmin"]

# Both layouts are read (see gateway/store/redis.py): this release's, whose turn fields are 8-byte
# message digests, and the previous release's, whose turn fields are 'm:' and the message id, for the
# conversations it wrote that no turn has moved since. Counts a conversation's turns into `replies`
# and `running` (live in-flight markers) as it walks its fields; calls each_turn(what the message's
# first-message key ends with) on every turn.
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
      if each_turn then each_turn(old and string.sub(name, 3) or name) end
    end
  end
  return replies, running
end
"""

# KEYS[1] owner index, KEYS[2] the previous release's. ARGV: owner (raw), owner (hex), conversation
# key prefix, the previous release's, now ms, idle ms, pruning horizon ms. Per conversation of the
# owner, in index order: {context id, opened ms or '', closed 0/1, replies, running}. Members past the
# horizon, gone, or not the owner's (a tombstone) leave the index; the previous release's index also
# loses those a turn has since moved into this layout's.
_LIST = Script(
    _TURNS_LUA
    + """
local now = tonumber(ARGV[5])
local found, seen = {}, {}
local function add(context)
  local key = ARGV[3] .. context
  local v = redis.call('HMGET', key, 'o', 'c', 't', 'l')
  local opened, last
  if v[1] == ARGV[1] then
    opened = tonumber(v[3])
    last = opened + tonumber(v[4])
  else
    key = ARGV[4] .. context
    v = redis.call('HMGET', key, 'o', 'c', 't', 'l')
    if v[1] ~= ARGV[2] then return false end
    opened, last = tonumber(v[3]), tonumber(v[4])
  end
  if seen[context] then return false end
  seen[context] = true
  local replies, running = count_turns(key, now)
  local closed = (v[2] == '1' or now - last > tonumber(ARGV[6])) and 1 or 0
  found[#found + 1] = {context, opened or '', closed, replies, running}
  return true
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', math.floor(tonumber(ARGV[7]) / 1000))
for _, context in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if not add(context) then redis.call('ZREM', KEYS[1], context) end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[7])
for _, context in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if not add(context) then redis.call('ZREM', KEYS[2], context) end
end
return found
"""
)

# KEYS[1] conversation, KEYS[2] owner index, KEYS[3] and KEYS[4] the previous release's. ARGV: owner
# (raw), owner (hex), context id, now ms, closed_ttl s. As _COMPLETE closes one: flag, TTL, and its
# deadline in the index (which outlives it already), in whichever layout holds it.
_CLOSE = Script("""
local function close(key, index, owner, deadline)
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
if close(KEYS[1], KEYS[2], ARGV[1], math.floor(now / 1000) + tonumber(ARGV[5])) then return 1 end
if close(KEYS[3], KEYS[4], ARGV[2], now + tonumber(ARGV[5]) * 1000) then return 1 end
return 0
""")

# KEYS[1] conversation, KEYS[2] owner index, KEYS[3] and KEYS[4] the previous release's, then the
# adapters' state keys of the conversation. ARGV: owner (raw), owner (hex), context id, the owner's
# first-message key prefix, the previous release's, tombstone ttl s, now ms. {replies, running,
# first-message records, adapter states} once erased, leaving the tombstone (under this layout's
# key, which a turn reads first); {} when it is not the owner's (or is gone): then it only leaves
# the indexes.
_ERASE = Script(
    _TURNS_LUA
    + """
redis.call('ZREM', KEYS[2], ARGV[3])
redis.call('ZREM', KEYS[4], ARGV[3])
local key, first
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] then
  key, first = KEYS[1], ARGV[4]
elseif redis.call('HGET', KEYS[3], 'o') == ARGV[2] then
  key, first = KEYS[3], ARGV[5]
else
  return {}
end
local firsts = 0
local replies, running = count_turns(key, tonumber(ARGV[7]), function(message)
  firsts = firsts + redis.call('DEL', first .. message)
end)
local states = 0
for i = 5, #KEYS do states = states + redis.call('DEL', KEYS[i]) end
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('HSET', KEYS[1], 'e', '1')
redis.call('EXPIRE', KEYS[1], ARGV[6])
return {replies, running, firsts, states}
"""
)


class RedisConversationAdmin(ConversationAdmin):
    """The operator's side of a :class:`~gateway.store.redis.RedisStore`, on its connection and clock.

    ``adapter_names`` are the names bot adapters keep per-conversation state under
    (:func:`gateway.store.keys.adapter_key`).
    """

    def __init__(
        self,
        redis: RedisPipe,
        cache: CacheConfig,
        adapter_names: Sequence[str],
        *,
        clock: Callable[[], float],
    ) -> None:
        self._redis = redis
        self._cache = cache
        self._adapter_names = tuple(adapter_names)
        self._clock = clock

    async def _listed(self, owner: Owner) -> list[Any]:
        now_ms = int(self._clock() * 1000)
        found: list[Any] = await self._redis.run(
            _LIST,
            [
                keys.conv_index_key(owner.brand_id, owner.digest_bytes),
                keys.owner_index_key(owner.brand_id, owner.digest),
            ],
            [
                owner.digest_bytes,
                owner.digest,
                keys.conv_key(owner.brand_id, ""),
                keys.conversation_key(owner.brand_id, ""),
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

    def _layouts(self, owner: Owner, context_id: str) -> list[str | bytes]:
        """A conversation's key and its owner's index, in this layout and in the previous release's."""
        return [
            keys.conv_key(owner.brand_id, context_id),
            keys.conv_index_key(owner.brand_id, owner.digest_bytes),
            keys.conversation_key(owner.brand_id, context_id),
            keys.owner_index_key(owner.brand_id, owner.digest),
        ]

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
        members: set[bytes] = set()
        for index_key in (
            keys.conv_index_key(owner.brand_id, owner.digest_bytes),
            keys.owner_index_key(owner.brand_id, owner.digest),
        ):
            members.update(await self._redis.execute("ZRANGE", index_key, 0, -1))
        # Sent together, so the pipe writes them as one batch: one round trip for all of them.
        results: list[list[Any]] = await asyncio.gather(
            *(self._erase_one(owner, member.decode(), now_ms) for member in sorted(members))
        )
        erased = [result for result in results if result]
        counted = await self._redis.execute("DEL", *counters, replicated=True) if counters else 0
        return Erased(
            conversations=len(erased),
            replies=sum(int(result[0]) for result in erased),
            in_flight=sum(int(result[1]) for result in erased),
            retry_records=sum(int(result[2]) for result in erased),
            adapter_states=sum(int(result[3]) for result in erased),
            counters=int(counted),
        )

    async def _erase_one(self, owner: Owner, context_id: str, now_ms: int) -> list[Any]:
        result: list[Any] = await self._redis.run(
            _ERASE,
            [
                *self._layouts(owner, context_id),
                *(keys.adapter_key(owner.brand_id, context_id, name) for name in self._adapter_names),
            ],
            [
                owner.digest_bytes,
                owner.digest,
                context_id,
                keys.first_key(owner.brand_id, owner.digest_bytes, b""),
                keys.first_message_key(owner.brand_id, owner.digest, ""),
                self._cache.pending_ttl,
                now_ms,
            ],
            replicated=True,
        )
        return result
