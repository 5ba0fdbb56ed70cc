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

# Counts a conversation's turns into `replies` and `running` (live in-flight markers) as it walks its
# fields; calls each_turn(message id) on every turn.
_TURNS_LUA = """
local function count_turns(key, now, each_turn)
  local replies, running = 0, 0
  local fields = redis.call('HGETALL', key)
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 2) == 'm:' then
      local value = fields[i + 1]
      if string.sub(value, 1, 1) == 'R' then
        replies = replies + 1
      elseif tonumber(string.match(value, '^P(%d+)')) > now then
        running = running + 1
      end
      if each_turn then each_turn(string.sub(fields[i], 3)) end
    end
  end
  return replies, running
end
"""

# KEYS[1] owner index. ARGV: owner, conversation key prefix, now ms, idle ms, pruning horizon ms.
# Per conversation of the owner, in index order: {context id, opened ms or '', closed 0/1, replies,
# running}. Members past the horizon, gone, or not the owner's (a tombstone) leave the index.
_LIST = Script(
    _TURNS_LUA
    + """
local now = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[5])
local found = {}
for _, context in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local key = ARGV[2] .. context
  local v = redis.call('HMGET', key, 'o', 'c', 'l', 't')
  if v[1] == ARGV[1] then
    local replies, running = count_turns(key, now)
    local closed = (v[2] == '1' or now - tonumber(v[3]) > tonumber(ARGV[4])) and 1 or 0
    found[#found + 1] = {context, v[4] or '', closed, replies, running}
  else
    redis.call('ZREM', KEYS[1], context)
  end
end
return found
"""
)

# KEYS[1] conversation, KEYS[2] owner index. ARGV: owner, context id, now ms, closed_ttl s.
# As _COMPLETE closes one: flag, TTL, and its deadline in the index (which outlives it already).
_CLOSE = Script("""
local v = redis.call('HMGET', KEYS[1], 'o', 'c')
if v[1] ~= ARGV[1] then return 0 end
if v[2] == '1' then return 1 end
redis.call('HSET', KEYS[1], 'c', '1')
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], tonumber(ARGV[3]) + tonumber(ARGV[4]) * 1000, ARGV[2])
return 1
""")

# KEYS[1] conversation, KEYS[2] owner index, then the adapters' state keys of the conversation.
# ARGV: owner, context id, the owner's first-message key prefix, tombstone ttl s, now ms.
# {replies, running, first-message records, adapter states} once erased, leaving the tombstone;
# {} when it is not the owner's (or is gone): then it only leaves the index.
_ERASE = Script(
    _TURNS_LUA
    + """
redis.call('ZREM', KEYS[2], ARGV[2])
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return {} end
local firsts = 0
local replies, running = count_turns(KEYS[1], tonumber(ARGV[5]), function(message_id)
  firsts = firsts + redis.call('DEL', ARGV[3] .. message_id)
end)
local states = 0
for i = 3, #KEYS do states = states + redis.call('DEL', KEYS[i]) end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'e', '1')
redis.call('EXPIRE', KEYS[1], ARGV[4])
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
            [keys.owner_index_key(owner.brand_id, owner.digest)],
            [
                owner.digest,
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

    async def close(self, owner: Owner, context_id: str) -> bool:
        closed = await self._redis.run(
            _CLOSE,
            [
                keys.conversation_key(owner.brand_id, context_id),
                keys.owner_index_key(owner.brand_id, owner.digest),
            ],
            [owner.digest, context_id, int(self._clock() * 1000), self._cache.closed_ttl],
            replicated=True,
        )
        return bool(closed)

    async def erase(self, owner: Owner, counters: Sequence[str]) -> Erased:
        index_key = keys.owner_index_key(owner.brand_id, owner.digest)
        now_ms = int(self._clock() * 1000)
        members: list[bytes] = await self._redis.execute("ZRANGE", index_key, 0, -1)
        # Sent together, so the pipe writes them as one batch: one round trip for all of them.
        results: list[list[Any]] = await asyncio.gather(
            *(self._erase_one(owner, member.decode(), index_key, now_ms) for member in members)
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

    async def _erase_one(self, owner: Owner, context_id: str, index_key: str, now_ms: int) -> list[Any]:
        result: list[Any] = await self._redis.run(
            _ERASE,
            [
                keys.conversation_key(owner.brand_id, context_id),
                index_key,
                *(keys.adapter_key(owner.brand_id, context_id, name) for name in self._adapter_names),
            ],
            [
                owner.digest,
                context_id,
                keys.first_message_key(owner.brand_id, owner.digest, ""),
                self._cache.pending_ttl,
                now_ms,
            ],
            replicated=True,
        )
        return result
