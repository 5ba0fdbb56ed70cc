"""The Redis backend: each turn decision in one Lua script, over one pipelined connection.

A conversation is one hash at :func:`keys.conv_key`, laid out to stay small (issue 17: about
260 bytes, listpack-encoded, where the previous layout took about 780 in a hash table): ``o``
the owner's digest (16 raw bytes), ``t`` the time it opened (ms: the operator's listing is in
opening order) and ``l`` the last turn's time as ms after ``t`` (a small integer), ``c`` and
``a`` only once closed or answered, ``u`` the Brand user's digest (raw) once a delegated turn
ran in it (§5.5), and one field per turn named by :func:`keys.message_digest` (8 bytes) holding
``P{deadline ms}|{claim token}`` while in flight or the stored reply once answered
(:mod:`gateway.store.replies`, in pieces no longer than a listpack value, see
:data:`REPLY_LUA`). Scripts make the in-flight marker atomic across
replicas and keep the hot path to two round trips per turn: one script begins it, charging the
request's §6 rate limits first (the same GCRA code as the separate limit check,
:data:`gateway.store.gcra.GCRA_LUA`) and, for a delegated turn, checking its grant (the hash
:mod:`gateway.store.oauth_redis` keeps) in the same script; one completes it. Keys are
standalone-Redis keys (a Redis Cluster would need hash tags). The connection is
:class:`RedisPipe`'s (see ``redis_pipe.py`` for why not a pooled client).

Each owner's conversations are also members of a sorted set (:func:`keys.conv_index_key`),
scored by their deadline in s, which the scripts that open and complete them keep up to date
in the same step and keep as long-lived as the longest of them, for listing and erasing them
(``admin_redis.py``). An erased conversation leaves a tombstone for ``pending_ttl``, a hash of
``e`` alone, over which a turn still running stores nothing. A first message's §4.3 record is a
string at :func:`keys.first_key`: its text's digest (:data:`FIRST_DIGEST` raw bytes) then its
``contextId``, 44 bytes for a UUID, which Redis keeps in the same allocation as the key's object.

The previous release's layout (``conv:``, ``owner:`` and ``first:`` keys, hex digests, ms,
``m:{messageId}`` fields) is still read: a conversation it wrote is moved into this layout by
its owner's next turn, inside the begin-turn script (with the first-message records of its
turns), and a first message it recorded is found by a retry. The upgrade is one-way: the
previous release does not read this layout, so replicas of both must not serve at once (issue
20); roll out by replacing every replica together (docs/capacity.md).

A claim whose outcome is unknown (the connection timed out or broke after the script was
sent, or the caller was cancelled) is released at once, not left to ``pending_ttl``: otherwise
the agent's retry would be refused as "still being processed" for a minute. Each begin-turn
attempt carries a random token in its marker; the release (:data:`_ABORT` with that token)
removes only a marker carrying it, and first marks the token released for ``pending_ttl``
(:func:`keys.released_claim_key`), so the script, should it reach Redis only after the release
(over the old connection), claims nothing.

With ``cache.wait_replicas`` (1 by default under Sentinel), claims and replies are written with
``WAIT`` behind them (:meth:`RedisPipe.execute`): a turn runs the bot only once its marker is on
a replica, and a reply is returned only once a replica holds it, so a failover that promotes that
replica keeps both.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from gateway.config import CacheConfig
from gateway.store import keys, replies
from gateway.store.base import (
    ConversationStore,
    GrantCheck,
    Owner,
    StoreError,
    TurnClaim,
    TurnStatus,
    text_digest,
)
from gateway.store.gcra import GCRA_LUA, US, Hit, script_arguments
from gateway.store.redis_cluster import open_pipe
from gateway.store.redis_pipe import RedisPipe, Script

# What a begin-turn script does first: nothing at all if its attempt was released (its last KEY is
# the token's released_claim_key, its last ARGV the token); then charge the limits (the leading
# KEYS; see GCRA_LUA) or answer {'limited', wait, ...} having claimed nothing; then K and A are its
# own KEYS and ARGV.
_CHARGE_FIRST = (
    GCRA_LUA
    + """
if redis.call('EXISTS', KEYS[#KEYS]) == 1 then return {'released'} end
local refused, waits, n = gcra()
if refused then return {'limited', unpack(waits)} end
local K, A = after_limits(n)
local function marker(deadline) return 'P' .. deadline .. '|' .. A[#A] end
"""
)

# §5.5, right after the limits: the grant at key G must be live (its ``e``, seconds, after NOW,
# ms) and belong to OWNER (hex, as gateway/store/oauth_redis.py keeps it); a delegated turn passes
# G, any other '' (nothing to check).
_GRANT_CHECK = """
local function grant_revoked(g, owner, now_ms)
  if g == '' then return false end
  local v = redis.call('HMGET', g, 'o', 'e')
  return v[1] ~= owner or tonumber(v[2]) * 1000 <= tonumber(now_ms)
end
"""

# A stored reply (gateway/store/replies.py) longer than a listpack value (hash-max-listpack-value,
# 64 by default) would turn the whole hash into a hash table, about three times its size: up to
# PIECES pieces it is kept as a first piece '#' .. count .. 62 bytes under the turn's field and the
# rest 64 bytes at a time under the field and the piece's number. Longer ones are kept whole.
REPLY_LUA = """
local PIECES = 8
local function put_reply(key, field, value)
  if #value <= 64 or #value > 62 + 64 * (PIECES - 1) then
    redis.call('HSET', key, field, value)
    return
  end
  local n = math.ceil((#value - 62) / 64) + 1
  local args = {field, '#' .. string.char(n) .. string.sub(value, 1, 62)}
  for i = 1, n - 1 do
    args[#args + 1] = field .. string.char(i)
    args[#args + 1] = string.sub(value, 63 + 64 * (i - 1), 62 + 64 * i)
  end
  redis.call('HSET', key, unpack(args))
end
local function get_reply(key, field, first)
  if string.sub(first, 1, 1) ~= '#' then return first end
  local parts = {string.sub(first, 3)}
  for i = 1, string.byte(first, 2) - 1 do
    parts[i + 1] = redis.call('HGET', key, field .. string.char(i))
  end
  return table.concat(parts)
end
"""

# The previous release's layout, read and moved into this one (see the module docstring).
_UPGRADE_LUA = """
local function raw(hex)
  return (string.gsub(hex, '%x%x', function(c) return string.char(tonumber(c, 16)) end))
end
-- A first-message record as the previous release kept it ("context|digest hex"), in this layout
-- (FIRST_DIGEST bytes of the digest).
local function old_first(value)
  if not value then return nil end
  local context, digest = string.match(value, '^(.*)|(%x+)$')
  return raw(string.sub(digest, 1, 16)) .. context
end
-- Moves the previous release's conversation OLD (if it is OWNER's, hex) to NEW, and into INDEX; and
-- the first-message records of its turns, from the prefix OLD_FIRST to NEW_FIRST (so an erasure,
-- which finds them by the conversation's turns, still finds them).
local function upgrade(old, new, index, context, owner, now_ms, old_first_prefix, new_first_prefix)
  local ttl = redis.call('PTTL', old)
  if ttl < 0 or redis.call('HGET', old, 'o') ~= owner then return end
  local f = redis.call('HGETALL', old)
  local v, out = {}, {}
  for i = 1, #f, 2 do
    local name, value = f[i], f[i + 1]
    if string.sub(name, 1, 2) == 'm:' then
      local message = raw(string.sub(redis.sha1hex(string.sub(name, 3)), 1, 16))
      out[#out + 1] = message
      out[#out + 1] = value
      local record = old_first_prefix .. string.sub(name, 3)
      local first = redis.call('GET', record)
      if first and string.sub(first, 1, #context + 1) == context .. '|' then
        redis.call('SET', new_first_prefix .. message, old_first(first), 'PX', redis.call('PTTL', record))
        redis.call('DEL', record)
      end
    else
      v[name] = value
    end
  end
  local last = tonumber(v.l)
  local opened = tonumber(v.t or v.l)
  out[#out + 1] = 'o'
  out[#out + 1] = raw(v.o)
  out[#out + 1] = 't'
  out[#out + 1] = opened
  out[#out + 1] = 'l'
  out[#out + 1] = last - opened
  for _, flag in ipairs({'c', 'a'}) do
    if v[flag] == '1' then
      out[#out + 1] = flag
      out[#out + 1] = '1'
    end
  end
  if v.u then
    out[#out + 1] = 'u'
    out[#out + 1] = raw(v.u)
  end
  redis.call('HSET', new, unpack(out))
  redis.call('PEXPIRE', new, ttl)
  redis.call('DEL', old)
  local ttl_s = math.ceil(ttl / 1000)
  redis.call('ZADD', index, math.floor(tonumber(now_ms) / 1000) + ttl_s, context)
  if redis.call('TTL', index) < ttl_s then redis.call('EXPIRE', index, ttl_s) end
end
"""

# K[1] conversation, K[2] first-message key ("" to skip the retry check), K[3] grant ("" if none),
# K[4] owner index, K[5] the previous release's first-message key, K[6] released claim. A: owner
# (raw), owner (hex), field, now_ms, pending_deadline_ms, record_ttl_s, retry_window_s, first_value,
# user (raw, "" if none), the first-message value this open takes over ("" if none), context id,
# index pruning horizon s, token. No other conversation of the index outlives this one, so the index
# is kept exactly as long; members whose deadline is past the horizon go.
_OPEN = Script(
    _CHARGE_FIRST
    + _GRANT_CHECK
    + _UPGRADE_LUA
    + """
if grant_revoked(K[3], A[2], A[4]) then return {'revoked'} end
if K[2] ~= '' then
  local earlier = redis.call('GET', K[2]) or old_first(redis.call('GET', K[5]))
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
"""
)

# K[1] conversation, K[2] grant ("" if none), K[3] the previous release's conversation key, K[4]
# owner index, K[5] released claim. A: owner (raw), owner (hex), field, now_ms, pending_deadline_ms,
# idle_ttl_ms, user (raw, "" if none), context id, the owner's first-message key prefix in the
# previous release's layout and in this one, token.
_CONTINUE = Script(
    _CHARGE_FIRST
    + _GRANT_CHECK
    + REPLY_LUA
    + _UPGRADE_LUA
    + """
if grant_revoked(K[2], A[2], A[4]) then return {'revoked'} end
if redis.call('EXISTS', K[1]) == 0 then upgrade(K[3], K[1], K[4], A[8], A[2], A[4], A[9], A[10]) end
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
"""
)

# KEYS[1] conversation, KEYS[2] owner index. ARGV: owner (raw), field, stored reply, now_ms, close
# flag, ttl_s, context id. Nothing is stored over an erased conversation's tombstone. The index is
# kept as long as this conversation now is, unless that is shorter (a close): then it still holds a
# longer one.
_COMPLETE = Script(
    REPLY_LUA
    + """
if redis.call('HEXISTS', KEYS[1], 'e') == 1 then return 0 end
local now_ms = tonumber(ARGV[4])
local opened = tonumber(redis.call('HGET', KEYS[1], 't')) or now_ms
put_reply(KEYS[1], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[1], 'o', ARGV[1], 't', opened, 'l', now_ms - opened, 'a', '1')
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'c', '1') end
redis.call('EXPIRE', KEYS[1], ARGV[6])
redis.call('ZADD', KEYS[2], math.floor(now_ms / 1000) + tonumber(ARGV[6]), ARGV[7])
if ARGV[5] ~= '1' or redis.call('TTL', KEYS[2]) < 0 then redis.call('EXPIRE', KEYS[2], ARGV[6]) end
return 1
"""
)

# KEYS[1] conversation, KEYS[2] first-message key, KEYS[3] released claim.
# ARGV: owner (raw), field, new flag, context id, token ("" for the marker, whoever set it),
# pending_ttl_s. Only an in-flight marker is released: a stored reply (a completion that did reach
# Redis) stays. A first-message record is its text digest (FIRST_DIGEST bytes) and context id.
_ABORT = Script("""
if ARGV[5] ~= '' then redis.call('SET', KEYS[3], '1', 'EX', ARGV[6]) end
local v = redis.call('HMGET', KEYS[1], 'o', ARGV[2])
if v[1] ~= ARGV[1] or not v[2] or string.sub(v[2], 1, 1) ~= 'P' then return 0 end
if ARGV[5] ~= '' and string.match(v[2], '|(.*)$') ~= ARGV[5] then return 0 end
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[1])
  local earlier = redis.call('GET', KEYS[2])
  if earlier and string.sub(earlier, 9) == ARGV[4] then redis.call('DEL', KEYS[2]) end
else
  redis.call('HDEL', KEYS[1], ARGV[2])
end
return 1
""")

_READY_KEY: Final = f"{keys.PREFIX}:readyz"
"""Deleted (it never exists) by the readiness check: a write that only a primary accepts, and that
changes nothing, so it reaches neither the replicas nor the append-only file."""
INDEX_SLACK_MS: Final = 60_000
"""How long past its deadline a conversation stays in its owner's index: the deadline is taken on the
gateway's clock, the expiry on Redis's, and a conversation must never leave the index before it expires."""
FIRST_DIGEST: Final = 8
"""Bytes of a first message's text digest in its record (:data:`_UPGRADE_LUA` takes as many hex digits
of the previous release's): it only tells one text sent under the same owner and ``messageId`` within
the retry window from another, and 64 bits do that; with them a record fits Redis's one-allocation
string (44 bytes)."""
_TAKEOVERS: Final = 3
"""Rounds a retried first message may go through when concurrent copies of it keep taking its
first-message record over; past them it is one of those duplicates, answered as still in flight."""


def _token() -> str:
    """A begin-turn attempt's token: 64 random bits; it names no one and grants nothing."""
    return f"{random.getrandbits(64):016x}"


class RedisStore(ConversationStore):
    def __init__(self, config: CacheConfig, *, clock: Callable[[], float] = time.time) -> None:
        self._config = config
        self._clock = clock
        self._redis = open_pipe(config)

    @property
    def redis(self) -> RedisPipe:
        """The connection; other Redis state (rate limits, grants) shares it."""
        return self._redis

    @property
    def _record_ttl(self) -> int:
        return self._config.conversation_ttl + self._config.closed_ttl

    async def _claiming(
        self,
        script: Script,
        keys_: list[str | bytes],
        args: list[Any],
        release: tuple[Owner, str, bytes, str, bool],
    ) -> list[Any]:
        """Run a begin-turn script; if its outcome is unknown, release what it may have claimed.

        ``release`` is ``(owner, context id, turn field, token, new conversation)``: what
        :meth:`abort_turn` would be given (its ``messageId`` as :func:`keys.message_digest`),
        plus the attempt's token. The release runs whatever
        went wrong (a timeout, a broken connection, an error answer, the caller cancelled), on a
        new connection if need be, shielded from cancellation; if Redis cannot be reached for it
        either, the marker lapses after ``pending_ttl`` as before.
        """
        try:
            result: list[Any] = await self._redis.run(script, keys_, args, replicated=True)
        except BaseException:
            await asyncio.shield(self._release(*release))
            raise
        return result

    async def _release(
        self, owner: Owner, context_id: str, field: bytes, token: str, new_conversation: bool
    ) -> None:
        with contextlib.suppress(StoreError):
            await self._abort(owner, context_id, field, new_conversation, token)

    async def _open(
        self,
        owner: Owner,
        context_id: str,
        first: tuple[bytes, str] | None,
        field: bytes,
        digest: bytes,
        now: float,
        token: str,
        *,
        takes_over: bytes = b"",
        limits: Sequence[Hit] = (),
        grant: GrantCheck | None = None,
    ) -> list[Any]:
        """``first``: the message's first-message key and the previous release's, or ``None`` (no check)."""
        limit_keys, limit_args = script_arguments(limits, int(now * US))
        now_ms = int(now * 1000)
        first_key, old_first_key = (b"", "") if first is None else first
        return await self._claiming(
            _OPEN,
            [
                *limit_keys,
                keys.conv_key(owner.brand_id, context_id),
                first_key,
                "" if grant is None else grant.grant_key,
                keys.conv_index_key(owner.brand_id, owner.digest_bytes),
                old_first_key,
                keys.released_claim_key(owner.brand_id, token),
            ],
            [
                *limit_args,
                owner.digest_bytes,
                owner.digest,
                field,
                now_ms,
                now_ms + self._config.pending_ttl * 1000,
                self._record_ttl,
                self._config.retry_window,
                digest + context_id.encode(),
                b"" if grant is None else bytes.fromhex(grant.user_digest),
                takes_over,
                context_id,
                (now_ms - INDEX_SLACK_MS) // 1000,
                token,
            ],
            (owner, context_id, field, token, True),
        )

    async def _continue(
        self,
        owner: Owner,
        context_id: str,
        field: bytes,
        now: float,
        token: str,
        limits: Sequence[Hit] = (),
        grant: GrantCheck | None = None,
    ) -> TurnClaim:
        limit_keys, limit_args = script_arguments(limits, int(now * US))
        now_ms = int(now * 1000)
        result = await self._claiming(
            _CONTINUE,
            [
                *limit_keys,
                keys.conv_key(owner.brand_id, context_id),
                "" if grant is None else grant.grant_key,
                keys.conversation_key(owner.brand_id, context_id),
                keys.conv_index_key(owner.brand_id, owner.digest_bytes),
                keys.released_claim_key(owner.brand_id, token),
            ],
            [
                *limit_args,
                owner.digest_bytes,
                owner.digest,
                field,
                now_ms,
                now_ms + self._config.pending_ttl * 1000,
                self._config.conversation_ttl * 1000,
                b"" if grant is None else bytes.fromhex(grant.user_digest),
                context_id,
                keys.first_message_key(owner.brand_id, owner.digest, ""),
                keys.first_key(owner.brand_id, owner.digest_bytes, b""),
                token,
            ],
            (owner, context_id, field, token, False),
        )
        verdict = result[0]
        if verdict == b"unknown":
            return TurnClaim(TurnStatus.UNKNOWN_CONTEXT)
        if verdict == b"replay":
            return TurnClaim(TurnStatus.REPLAY, context_id, reply=replies.unpack(result[1], context_id))
        if verdict == b"closed":
            return TurnClaim(TurnStatus.CLOSED, context_id)
        if verdict == b"in_flight":
            return TurnClaim(TurnStatus.IN_FLIGHT, context_id)
        if verdict == b"limited":
            return _limited(result)
        if verdict == b"revoked":
            return TurnClaim(TurnStatus.GRANT_REVOKED)
        if verdict == b"mismatch":
            return TurnClaim(TurnStatus.USER_MISMATCH)
        return TurnClaim(TurnStatus.NEW, context_id, new_conversation=len(result) < 2 or result[1] != b"1")

    async def begin_turn(
        self,
        owner: Owner,
        context_id: str | None,
        message_id: str,
        text: str,
        new_context_id: str,
        *,
        limits: Sequence[Hit] = (),
        grant: GrantCheck | None = None,
    ) -> TurnClaim:
        """One round trip on the hot path (the limits and the grant check ride along in the script).

        Rarer paths, none of which charges the limits again: a first message retried without
        ``contextId`` within the retry window takes a second (``_CONTINUE`` claims the earlier
        conversation); one whose ``messageId`` an earlier, different first message used takes a
        second too (its own ``_OPEN`` without the retry check), and a third when the retried
        message's earlier conversation is gone or was closed without answering it (an
        ``_OPEN`` that takes the first-message record over, unless a concurrent copy of the
        message took it first: then the next round claims that copy's conversation).
        """
        now = self._clock()
        token = _token()
        field = keys.message_digest(message_id)
        if context_id is not None:
            return await self._continue(owner, context_id, field, now, token, limits, grant)
        digest = text_digest(text)[:FIRST_DIGEST]
        first = (
            keys.first_key(owner.brand_id, owner.digest_bytes, field),
            keys.first_message_key(owner.brand_id, owner.digest, message_id),
        )
        result = await self._open(
            owner, new_context_id, first, field, digest, now, token, limits=limits, grant=grant
        )
        for _ in range(_TAKEOVERS):
            if result[0] == b"new":
                return TurnClaim(TurnStatus.NEW, new_context_id, new_conversation=True)
            if result[0] == b"limited":
                return _limited(result)
            if result[0] == b"revoked":
                return TurnClaim(TurnStatus.GRANT_REVOKED)
            earlier: bytes = result[1]
            earlier_digest, earlier_context = earlier[: len(digest)], earlier[len(digest) :].decode()
            if earlier_digest != digest:
                # A different first message that reuses a messageId opens its own conversation, unchecked.
                result = await self._open(owner, new_context_id, None, field, digest, now, token, grant=grant)
                if result[0] == b"revoked":
                    return TurnClaim(TurnStatus.GRANT_REVOKED)
                return TurnClaim(TurnStatus.NEW, new_context_id, new_conversation=True)
            # The grant is checked again by each later script: it may have been revoked in between.
            claim = await self._continue(owner, earlier_context, field, now, token, grant=grant)
            if claim.status not in (TurnStatus.UNKNOWN_CONTEXT, TurnStatus.CLOSED):
                return claim
            # §4.3 with §4.2 (see ConversationStore.begin_turn): nothing of this message to replay,
            # so it starts the conversation it asks for, and becomes what a later retry finds.
            result = await self._open(
                owner, new_context_id, first, field, digest, now, token, takes_over=earlier, grant=grant
            )
        return TurnClaim(TurnStatus.IN_FLIGHT)

    async def complete_turn(
        self, owner: Owner, context_id: str, message_id: str, reply: bytes, *, close: bool
    ) -> None:
        await self._redis.run(
            _COMPLETE,
            [
                keys.conv_key(owner.brand_id, context_id),
                keys.conv_index_key(owner.brand_id, owner.digest_bytes),
            ],
            [
                owner.digest_bytes,
                keys.message_digest(message_id),
                replies.pack(reply, context_id),
                int(self._clock() * 1000),
                1 if close else 0,
                self._config.closed_ttl if close else self._record_ttl,
                context_id,
            ],
            replicated=True,
        )

    async def abort_turn(
        self, owner: Owner, context_id: str, message_id: str, *, new_conversation: bool
    ) -> None:
        await self._abort(owner, context_id, keys.message_digest(message_id), new_conversation, "")

    async def _abort(
        self, owner: Owner, context_id: str, field: bytes, new_conversation: bool, token: str
    ) -> None:
        await self._redis.run(
            _ABORT,
            [
                keys.conv_key(owner.brand_id, context_id),
                keys.first_key(owner.brand_id, owner.digest_bytes, field),
                keys.released_claim_key(owner.brand_id, token),
            ],
            [
                owner.digest_bytes,
                field,
                1 if new_conversation else 0,
                context_id,
                token,
                self._config.pending_ttl,
            ],
        )

    async def start(self) -> None:
        """Nothing to start: Redis expires the keys itself."""

    async def ping(self) -> None:
        """Ready as turns are: a write only a primary accepts, with the replicas turns wait for.

        A replica (``READONLY``), a server still loading, or a primary without the replicas
        ``cache.replicas`` asks for fails it, and makes the pipe reconnect (under Sentinel, to
        the primary the sentinels name now).
        """
        await self._redis.execute("DEL", _READY_KEY, replicated=True)

    @property
    def clock(self) -> Callable[[], float]:
        """This store's time; the rate limiter beside it keeps the same, so both charge one budget alike."""
        return self._clock

    async def close(self) -> None:
        await self._redis.close()


def _limited(result: list[Any]) -> TurnClaim:
    """A begin-turn script's ``{'limited', wait, ...}`` (µs per limit) as a claim."""
    return TurnClaim(TurnStatus.RATE_LIMITED, waits=tuple(int(wait) / US for wait in result[1:]))
