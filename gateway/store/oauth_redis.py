"""The §5 flow's state on Redis, over the conversation store's own pipelined connection.

Each decision that must hold across replicas is one Lua script (redeeming a device code,
rotating a refresh token, taking a consent session, using a marker, settling an
authorization), a file of ``gateway/store/lua`` (``oauth_*.lua``); plain reads are plain
commands. Every key gets a TTL, and every record also carries its own deadline, which is what
decides: ``now`` comes from the caller (or this store's clock, the conversation store's), so
replicas and tests decide by the clock they pass, and a TTL only reclaims memory. Times are
seconds as Python's ``repr`` of the float: Lua reads them as the same doubles, and scripts only
compare them, never format one, so they come back exactly as written.

The layout, by :func:`gateway.store.keys.oauth_key` kind unless said otherwise:

* ``device`` (hash): ``o`` owner digest, ``c`` client, ``s`` scopes (space-separated, as
  OAuth scope ids never hold a space), ``e`` expires, ``i`` interval, ``t`` status, ``k``
  user code, ``p`` previous poll; once approved ``u`` user, ``a`` approved scopes, ``x`` those
  of them carried from the grant to be superseded (if any) and ``d`` the user's digest; the RFC
  9396 details (canonical JSON each, joined by newlines, which canonical JSON never holds), if
  any: ``ad`` requested, ``aa`` approved and ``ak`` those of them carried. Kept
  :data:`~gateway.store.oauth.EXPIRED_KEPT` seconds past ``e`` so a late poll still hears
  ``expired_token``;
* ``user_code`` (string): ``{device hash}|{expires}``, created with the authorization only if
  no live one holds the code;
* ``consent`` (hash): ``d`` device hash, ``u`` user, ``e`` expires; ``once`` (string): expires;
* ``landing`` (hash): ``o`` outcome, ``s``, ``c`` and ``x`` its scopes, carried and dropped ones,
  ``ad``, ``ak`` and ``ax`` the same of its details, ``e`` expires;
* a grant, at :func:`gateway.store.keys.grant_key` (hash): ``o`` owner digest (which every
  delegated begin-turn script reads), ``c`` client, ``u`` user, ``s`` scopes, ``k`` the carried
  ones (if any), ``ad`` its RFC 9396 details and ``ak`` the carried ones (if any; a grant
  written before they existed has neither: none), ``i`` issued, ``e`` expires, and its refresh
  family: ``f`` the family's hash, ``r`` the current token's hash, ``p`` the previous one's
  (after a first rotation). Revoking, superseding or a reused refresh token deletes it, family
  and all;
* ``grace`` (hash), by grant id: ``p`` the previous token's hash, ``e`` deadline, ``b`` the last
  rotation's sealed answer; written by a rotation with a grace, living just that long;
* its slot, at :func:`gateway.store.keys.grant_slot_key` (string): the id of the live grant of
  that (user, owner);
* ``user`` (set): the grant ids of a Brand user, dead ones dropped when next read and a
  superseded one when it is superseded;
* ``owner`` (set): the same, for the (personal agent, ``sub``) they were issued to, by owner digest;
* ``owner_authz`` (sorted set): the device hashes of the authorizations for one (personal agent,
  ``sub``), scored by their expiry; ``user_authz``: the same, by the Brand user's digest, those
  they approved. Each addition first drops the lapsed members (so a set holds only those of the
  last ``expires_in`` seconds) and the set lives as long as its latest member.

The previous release kept a ``refresh`` string (the grant id) per refresh token ever issued,
and grants with no ``f``; both are still read until they expire: such a token, if current,
rotates into a family, so nothing of that layout is written any more.

Two scripts reach keys they learn only as they run, from prefixes passed in ARGV: the poll
(the slot(s) from the digest approval stored, and the grant it supersedes) and the rotation of a
previous release's token (the grant it belongs to), so each stays one step.

Issue 20, two layouts (``cache.key_layout``). ``previous`` writes exactly the keys above, as the
previous release (6ad6c1f) does, so its replicas serve beside this one. ``tagged`` puts every key
one script touches in one Redis Cluster slot (:func:`gateway.store.keys.oauth_tagged_key`): under
the owner's tag (:func:`gateway.store.keys.owner_tag`) the device authorization, the owner's
authorization index and grant set, the (user, owner) slot, and each grant and its grace (the grant
id carries the tag: :func:`gateway.store.keys.grant_key`), so a redemption, a rotation, a reuse's
revocation and the begin-turn step's grant check are each one script in the owner's slot; under
the user's digest's tag the user's authorization index and grant set, each updated by its own
command beside the owner's script (the order, and what a crash between leaves, in the docstrings
of :meth:`RedisOAuthStore._settle` and :meth:`RedisOAuthStore.poll`); user codes, consent
sessions, landing records and used ``jti``s are single keys, one slot each, named as before. The
user code's value gains the owner's tag (``device|expires|tag``), which finds the device: the
previous release could not read it, and it never has to, as ``tagged`` is set only once every
replica runs this release (the switch from ``previous`` is a rolling restart of this release).

Whichever is written, both are read: an authorization is looked for in each layout and settled or
redeemed in the one it is in; a slot, a user's or an owner's grants are read from both. On a
single Redis or Sentinel a script may touch both layouts' keys (it reads the other layout's slot
on a redemption); on a Redis Cluster, which never held a previous key, ``reads_previous`` is off
and nothing of the previous layout is named.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from gateway.protocol.authorization_details import join_details, split_details
from gateway.store import keys, lua
from gateway.store.oauth import (
    EXPIRED_KEPT,
    AuthorizationStatus,
    ConsentSession,
    DeviceAuthorization,
    Grant,
    LandingRecord,
    OAuthStore,
    PollOutcome,
    PollResult,
    RefreshOutcome,
    RefreshResult,
    RefreshToken,
)
from gateway.store.redis_pipe import Arg, RedisPipe, Script

__all__ = ["RedisOAuthStore"]

# Each script is a file of gateway/store/lua (its header: what it takes, returns and why it is one
# script), read once, here.
_CREATE = Script(lua.source("oauth_create_authorization.lua"))
_RESERVE_CODE = Script(lua.source("oauth_reserve_user_code.lua"))
_PUT_DEVICE = Script(lua.source("oauth_put_device.lua"))
_INDEX = Script(lua.source("oauth_index_approval.lua"))
_SETTLE = Script(lua.source("oauth_settle_authorization.lua"))
_DENY_INDEXED = Script(lua.source("oauth_deny_by_index.lua"))
_DENY_APPROVED = Script(lua.source("oauth_deny_approved_by_user.lua"))
_POLL = Script(lua.source("oauth_redeem_device_code.lua"))
_ADD_MEMBER = Script(lua.source("oauth_add_to_set.lua"))
_PUT_HASH = Script(lua.source("oauth_put_record.lua"))
_TAKE = Script(lua.source("oauth_take_consent_session.lua"))
_TAKE_LANDING = Script(lua.source("oauth_take_landing.lua"))
_ONCE = Script(lua.source("oauth_use_once.lua"))
_ROTATE = Script(lua.source("oauth_rotate_refresh.lua"))
_REVOKE = Script(lua.source("oauth_revoke_grant.lua"))


def _ttl_ms(deadline: float, now: float) -> int:
    """Milliseconds from ``now`` to ``deadline``, at least 1 (Redis refuses a TTL of 0)."""
    return max(1, math.ceil((deadline - now) * 1000))


def _time(value: float) -> str:
    # repr round-trips a float exactly, and Lua's tonumber reads it as the same double.
    return repr(float(value))


def _scopes(value: bytes) -> tuple[str, ...]:
    return tuple(value.decode().split())


def _details(value: bytes) -> tuple[str, ...]:
    """RFC 9396 details as one field keeps them; ``b""`` (or a record written before them): none."""
    return split_details(value.decode())


def _fields(flat: Sequence[bytes]) -> dict[bytes, bytes]:
    """``HGETALL``'s flat ``[field, value, …]`` as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _grant(brand_id: str, grant_id: str, fields: dict[bytes, bytes]) -> Grant:
    return Grant(
        grant_id=grant_id,
        brand_id=brand_id,
        client_id=fields[b"c"].decode(),
        owner_digest=fields[b"o"].decode(),
        user=fields[b"u"].decode(),
        scopes=_scopes(fields[b"s"]),
        issued_at=float(fields[b"i"]),
        expires_at=float(fields[b"e"]),
        carried=_scopes(fields.get(b"k", b"")),
        details=_details(fields.get(b"ad", b"")),
        carried_details=_details(fields.get(b"ak", b"")),
    )


class _At(NamedTuple):
    """Where a device authorization is, in one layout: its key and whether that layout is tagged."""

    key: str
    tagged: bool


class RedisOAuthStore(OAuthStore):
    """The §5 records on the conversation store's Redis, through its connection (no second one).

    ``clock`` decides where a method takes no ``now``: pass the conversation store's, as
    :func:`gateway.store.factory.open_oauth_store` does. ``tagged``: whether new records are written
    in the tagged layout (``cache.key_layout: tagged``) or exactly as the previous release writes
    them; both layouts are read (see the module's docstring), unless ``reads_previous`` is false: on
    a Redis Cluster, which never held a previous key and where a script may not touch a key of
    another slot (the conversation store's flags of the same names).
    """

    def __init__(
        self,
        redis: RedisPipe,
        *,
        clock: Callable[[], float] = time.time,
        tagged: bool = True,
        reads_previous: bool = True,
    ) -> None:
        self._redis = redis
        self._clock = clock
        self._tagged = tagged
        self._read_previous = reads_previous
        self.tags_grant_ids = tagged

    def _layouts(self) -> tuple[bool, ...]:
        """The layouts to look in, as ``tagged`` flags: the one written first, then the other if read."""
        if not self._read_previous:
            return (True,)
        return (True, False) if self._tagged else (False, True)

    @staticmethod
    def _device_key(brand_id: str, owner_digest: str, device_hash: str, *, tagged: bool) -> str:
        if tagged:
            return keys.oauth_tagged_key(brand_id, keys.owner_tag(owner_digest), "d", device_hash)
        return keys.oauth_key(brand_id, "device", device_hash)

    @staticmethod
    def _owner_grants_key(brand_id: str, owner_digest: str, *, tagged: bool) -> str:
        """The set of an owner's grants, in one layout (tagged: under the owner's own tag)."""
        if tagged:
            return keys.oauth_tagged_key(brand_id, keys.owner_tag(owner_digest), "o", owner_digest)
        return keys.oauth_key(brand_id, "owner", owner_digest)

    @staticmethod
    def _user_grants_key(brand_id: str, user_digest: str, *, tagged: bool) -> str:
        """The set of a Brand user's grants, in one layout (tagged: under the user's own tag)."""
        if tagged:
            return keys.oauth_tagged_key(brand_id, keys.owner_tag(user_digest), "u", user_digest)
        return keys.oauth_key(brand_id, "user", user_digest)

    def _devices(self, authorization: DeviceAuthorization) -> list[_At]:
        """Where ``authorization`` may be, in the order to look: each layout's key for it."""
        brand_id, owner = authorization.brand_id, authorization.owner_digest
        return [
            _At(self._device_key(brand_id, owner, authorization.device_hash, tagged=tagged), tagged)
            for tagged in self._layouts()
        ]

    async def create_authorization(self, authorization: DeviceAuthorization) -> bool:
        """Previous layout: one script, as the previous release runs it. Tagged: the user code is
        reserved first (a key found from the code alone, so in a slot of its own), then the device
        and the owner's index are written in the owner's slot. A crash between the two leaves a
        reserved code naming no device: :meth:`authorization_by_user_code` finds nothing behind it,
        the personal agent never received the device code (its request failed), and the code is
        free again when its TTL ends."""
        brand_id, expires = authorization.brand_id, authorization.expires_at
        now = self._clock()
        fields: list[Arg] = [
            "o", authorization.owner_digest,
            "c", authorization.client_id,
            "s", " ".join(authorization.scopes),
            "e", _time(expires),
            "i", authorization.interval,
            "t", authorization.status.value,
            "k", authorization.user_code,
        ]  # fmt: skip
        if authorization.user is not None:
            fields += ["u", authorization.user, "d", keys.user_digest(brand_id, authorization.user)]
        if authorization.approved:
            fields += ["a", " ".join(authorization.approved)]
        if authorization.carried:
            fields += ["x", " ".join(authorization.carried)]
        for name, details in (
            ("ad", authorization.details),
            ("aa", authorization.approved_details),
            ("ak", authorization.carried_details),
        ):
            if details:
                fields += [name, join_details(details)]
        code_key = keys.oauth_key(brand_id, "user_code", authorization.user_code)
        device_hash, owner = authorization.device_hash, authorization.owner_digest
        if not self._tagged:
            created = await self._redis.run(
                _CREATE,
                [
                    code_key,
                    self._device_key(brand_id, owner, device_hash, tagged=False),
                    keys.oauth_key(brand_id, "owner_authz", owner),
                ],
                [
                    _time(now),
                    f"{device_hash}|{_time(expires)}",
                    _ttl_ms(expires, now),
                    _ttl_ms(expires + EXPIRED_KEPT, now),
                    device_hash,
                    _time(expires),
                    *fields,
                ],
            )
            return bool(created)
        tag = keys.owner_tag(owner)
        index = f"{device_hash}|{_time(expires)}|{tag}"
        if not await self._redis.run(_RESERVE_CODE, [code_key], [_time(now), index, _ttl_ms(expires, now)]):
            return False
        await self._redis.run(
            _PUT_DEVICE,
            [
                self._device_key(brand_id, owner, device_hash, tagged=True),
                keys.oauth_tagged_key(brand_id, tag, "a", owner),
            ],
            [
                _time(now),
                _ttl_ms(expires, now),
                _ttl_ms(expires + EXPIRED_KEPT, now),
                device_hash,
                _time(expires),
                *fields,
            ],
        )
        return True

    async def authorization_by_user_code(
        self, brand_id: str, user_code: str, now: float
    ) -> DeviceAuthorization | None:
        index = await self._redis.execute("GET", keys.oauth_key(brand_id, "user_code", user_code))
        if index is None:
            return None
        # ``device|expires`` (previous layout) or ``device|expires|owner tag`` (tagged).
        device_hash, expires, *tagged = index.decode().split("|")
        if float(expires) <= now:
            return None
        device_key = (
            keys.oauth_tagged_key(brand_id, tagged[0], "d", device_hash)
            if tagged
            else keys.oauth_key(brand_id, "device", device_hash)
        )
        flat = await self._redis.execute("HGETALL", device_key)
        fields = _fields(flat)
        # A code expired and drawn again between the two reads names the new authorization, not this one.
        if not fields or fields[b"k"].decode() != user_code or float(fields[b"e"]) <= now:
            return None
        user = fields.get(b"u")
        return DeviceAuthorization(
            device_hash=device_hash,
            user_code=user_code,
            brand_id=brand_id,
            client_id=fields[b"c"].decode(),
            owner_digest=fields[b"o"].decode(),
            scopes=_scopes(fields[b"s"]),
            expires_at=float(fields[b"e"]),
            interval=int(fields[b"i"]),
            status=AuthorizationStatus(fields[b"t"].decode()),
            user=None if user is None else user.decode(),
            approved=_scopes(fields.get(b"a", b"")),
            carried=_scopes(fields.get(b"x", b"")),
            details=_details(fields.get(b"ad", b"")),
            approved_details=_details(fields.get(b"aa", b"")),
            carried_details=_details(fields.get(b"ak", b"")),
        )

    async def _settle(
        self, authorization: DeviceAuthorization, now: float, changes: Sequence[Arg], *, user: str = ""
    ) -> bool:
        """Settle a live PENDING authorization, in whichever layout it is; ``user``: the approving
        user's digest, whose index it joins.

        Tagged, the user's index is in the user's slot, so it is written first, by its own script,
        then the authorization is settled in the owner's slot. A crash between the two leaves an
        index entry for an authorization this user did not approve: denying by user
        (:meth:`deny_authorizations_of_user`) checks who approved each one, so it is skipped, and it
        leaves the index when the authorization expires. The other order could leave an approval
        that the user's revocation of all their grants would not find, and the next poll would mint it.
        """
        brand_id, device_hash = authorization.brand_id, authorization.device_hash
        for at in self._devices(authorization):
            if at.tagged:
                if user:
                    expires = authorization.expires_at
                    await self._redis.run(
                        _INDEX,
                        [keys.oauth_tagged_key(brand_id, keys.owner_tag(user), "A", user)],
                        [
                            _time(now),
                            keys.owner_tag(authorization.owner_digest) + device_hash,
                            _time(expires),
                            _ttl_ms(expires, now),
                        ],
                    )
                settled = await self._redis.run(_SETTLE, [at.key], [_time(now), "", *changes])
            else:
                user_index = [keys.oauth_key(brand_id, "user_authz", user)] if user else []
                settled = await self._redis.run(
                    _SETTLE, [at.key, *user_index], [_time(now), device_hash if user else "", *changes]
                )
            if settled != -1:
                return bool(settled)
        return False

    async def deny_authorizations_of_owner(self, brand_id: str, owner_digest: str, now: float) -> int:
        denied = 0
        for tagged in self._layouts():
            if tagged:
                tag = keys.owner_tag(owner_digest)
                index_key = keys.oauth_tagged_key(brand_id, tag, "a", owner_digest)
                prefix = keys.oauth_tagged_key(brand_id, tag, "d", "")
            else:
                index_key = keys.oauth_key(brand_id, "owner_authz", owner_digest)
                prefix = keys.oauth_key(brand_id, "device", "")
            denied += int(await self._redis.run(_DENY_INDEXED, [index_key], [_time(now), prefix]))
        return denied

    async def deny_authorizations_of_user(self, brand_id: str, user: str, now: float) -> int:
        """Tagged, the user's index (their slot) names authorizations of many owners (many slots):
        it is read, each owner slot's are denied by one script, and the index is dropped last, so a
        crash part way leaves it to be denied again (denying is idempotent)."""
        digest = keys.user_digest(brand_id, user)
        denied = 0
        for tagged in self._layouts():
            if not tagged:
                previous = keys.oauth_key(brand_id, "user_authz", digest)
                prefix = keys.oauth_key(brand_id, "device", "")
                denied += int(await self._redis.run(_DENY_INDEXED, [previous], [_time(now), prefix]))
                continue
            index_key = keys.oauth_tagged_key(brand_id, keys.owner_tag(digest), "A", digest)
            members = await self._redis.execute("ZRANGEBYSCORE", index_key, f"({_time(now)}", "+inf")
            by_owner: dict[str, list[str]] = {}
            for member in members:
                entry = member.decode()
                tag, device_hash = entry[:8], entry[8:]
                by_owner.setdefault(tag, []).append(keys.oauth_tagged_key(brand_id, tag, "d", device_hash))
            args: list[Arg] = [_time(now), digest]
            slots = by_owner.values()
            counts = await asyncio.gather(*(self._redis.run(_DENY_APPROVED, each, args) for each in slots))
            denied += sum(int(count) for count in counts)
            await self._redis.execute("DEL", index_key)
        return denied

    async def approve(
        self,
        brand_id: str,
        authorization: DeviceAuthorization,
        user: str,
        scopes: tuple[str, ...],
        now: float,
        *,
        carried: tuple[str, ...] = (),
        details: tuple[str, ...] = (),
        carried_details: tuple[str, ...] = (),
    ) -> bool:
        digest = keys.user_digest(brand_id, user)
        changes: list[Arg] = [
            "t", AuthorizationStatus.APPROVED.value,
            "u", user,
            "a", " ".join(scopes),
            "d", digest,
        ]  # fmt: skip
        if carried:
            changes += ["x", " ".join(carried)]
        if details:
            changes += ["aa", join_details(details)]
        if carried_details:
            changes += ["ak", join_details(carried_details)]
        return await self._settle(authorization, now, changes, user=digest)

    async def deny(self, brand_id: str, authorization: DeviceAuthorization, now: float) -> bool:
        return await self._settle(authorization, now, ["t", AuthorizationStatus.DENIED.value])

    async def poll(
        self,
        brand_id: str,
        device_hash: str,
        owner_digest: str,
        now: float,
        *,
        refresh: RefreshToken,
        grant_ttl: int,
        max_user_grants: int | None = None,
    ) -> PollResult:
        """One script in the authorization's layout (looked for in each). Tagged, its keys (the
        device, the grant, the owner's set and the (user, owner) slot) are the owner's slot, and the
        grant joins the user's set (the user's slot) by a second script once the first issued it.
        A crash between the two leaves a grant no token of which was handed out (the answer is sent
        after both), so no one can use it; it still holds its slot, where the next approval
        supersedes it, and the owner's set, where erasure finds it; it expires at ``grant_ttl``."""
        expires = now + grant_ttl
        grant_id = refresh.grant_id
        tag = keys.owner_tag(owner_digest)
        slot_prefixes = {
            True: keys.oauth_tagged_key(brand_id, tag, "s", ""),
            False: keys.grant_slot_key(brand_id, "", ""),
        }
        for tagged in self._layouts():
            other = "" if not self._read_previous else slot_prefixes[not tagged]
            result = await self._redis.run(
                _POLL,
                [
                    self._device_key(brand_id, owner_digest, device_hash, tagged=tagged),
                    keys.grant_key(brand_id, grant_id),
                    self._owner_grants_key(brand_id, owner_digest, tagged=tagged),
                ],
                [
                    owner_digest,
                    _time(now),
                    refresh.token_hash,
                    _time(expires),
                    _ttl_ms(expires, now),
                    grant_id,
                    refresh.family_hash,
                    f"{keys.PREFIX}:{brand_id}:",
                    "" if tagged else keys.oauth_key(brand_id, "user", ""),
                    slot_prefixes[tagged],
                    other,
                ],
            )
            if result[0] != b"missing":
                break
        else:
            return PollResult(PollOutcome.INVALID_GRANT)
        outcome = PollOutcome(result[0].decode())
        if outcome is not PollOutcome.ISSUED:
            return PollResult(outcome)
        _, client_id, user, scopes, carried, ended, digest, details, carried_details = result
        if tagged:
            user_set = self._user_grants_key(brand_id, digest.decode(), tagged=True)
            await self._redis.run(_ADD_MEMBER, [user_set], [grant_id, _ttl_ms(expires, now)])
        grant = Grant(
            grant_id=grant_id,
            brand_id=brand_id,
            client_id=client_id.decode(),
            owner_digest=owner_digest,
            user=user.decode(),
            scopes=_scopes(scopes),
            issued_at=now,
            expires_at=expires,
            carried=_scopes(carried),
            details=_details(details),
            carried_details=_details(carried_details),
        )
        capped = 0
        if max_user_grants is not None:
            capped = await self._cap(brand_id, digest.decode(), grant_id, max_user_grants, now)
        return PollResult(outcome, grant, ended == b"1", capped)

    async def _cap(self, brand_id: str, user_digest: str, newest: str, most: int, now: float) -> int:
        """Revoke the user's oldest live grants past ``most``, ``newest`` (just issued) kept.

        After the poll's script, not in it: on a Redis Cluster the user's grants live in their
        owners' slots, one per (personal agent, ``sub``), which no one script may reach together.
        Two polls racing here revoke the same oldest grants (both read the one set, oldest first),
        so the user ends with ``most`` live grants either way; revoking is idempotent."""
        sets = [self._user_grants_key(brand_id, user_digest, tagged=tagged) for tagged in self._layouts()]
        live = await self._indexed(brand_id, sets, now)
        excess = [grant.grant_id for grant in live if grant.grant_id != newest][: max(0, len(live) - most)]
        if not excess:
            return 0
        revoked = await asyncio.gather(*(self.revoke_grant(brand_id, grant_id) for grant_id in excess))
        await asyncio.gather(*(self._redis.execute("SREM", index_set, *excess) for index_set in sets))
        return sum(revoked)

    async def put_consent_session(self, brand_id: str, session_hash: str, session: ConsentSession) -> None:
        await self._redis.run(
            _PUT_HASH,
            [keys.oauth_key(brand_id, "consent", session_hash)],
            [
                _ttl_ms(session.expires_at, self._clock()),
                "d", session.device_hash,
                "u", session.user,
                "e", _time(session.expires_at),
            ],
        )  # fmt: skip

    async def take_consent_session(
        self, brand_id: str, session_hash: str, now: float
    ) -> ConsentSession | None:
        taken = await self._redis.run(
            _TAKE, [keys.oauth_key(brand_id, "consent", session_hash)], [_time(now)]
        )
        if taken is None:
            return None
        device_hash, user, expires = taken
        return ConsentSession(device_hash=device_hash.decode(), user=user.decode(), expires_at=float(expires))

    async def put_landing(self, brand_id: str, record_hash: str, record: LandingRecord) -> None:
        await self._redis.run(
            _PUT_HASH,
            [keys.oauth_key(brand_id, "landing", record_hash)],
            [
                _ttl_ms(record.expires_at, self._clock()),
                "o", record.outcome,
                "s", " ".join(record.scopes),
                "c", " ".join(record.carried),
                "x", " ".join(record.dropped),
                "ad", join_details(record.details),
                "ak", join_details(record.carried_details),
                "ax", join_details(record.dropped_details),
                "e", _time(record.expires_at),
            ],
        )  # fmt: skip

    async def take_landing(self, brand_id: str, record_hash: str, now: float) -> LandingRecord | None:
        taken = await self._redis.run(
            _TAKE_LANDING, [keys.oauth_key(brand_id, "landing", record_hash)], [_time(now)]
        )
        if taken is None:
            return None
        outcome, scopes, carried, dropped, expires, details, carried_details, dropped_details = taken
        return LandingRecord(
            outcome=outcome.decode(),
            scopes=_scopes(scopes),
            carried=_scopes(carried),
            dropped=_scopes(dropped),
            expires_at=float(expires),
            details=_details(details),
            carried_details=_details(carried_details),
            dropped_details=_details(dropped_details),
        )

    async def use_once(self, brand_id: str, marker: str, ttl: float) -> bool:
        now = self._clock()
        used = await self._redis.run(
            _ONCE,
            [keys.oauth_key(brand_id, "once", marker)],
            [_time(now), _time(now + ttl), _ttl_ms(now + ttl, now)],
        )
        return bool(used)

    async def get_grant(self, brand_id: str, grant_id: str, now: float) -> Grant | None:
        flat = await self._redis.execute("HGETALL", keys.grant_key(brand_id, grant_id))
        fields = _fields(flat)
        if not fields or float(fields[b"e"]) <= now:
            return None
        return _grant(brand_id, grant_id, fields)

    async def live_grant_of(self, brand_id: str, user: str, owner_digest: str, now: float) -> Grant | None:
        digest = keys.user_digest(brand_id, user)
        for tagged in self._layouts():
            slot = (
                keys.oauth_tagged_key(brand_id, keys.owner_tag(owner_digest), "s", digest + owner_digest)
                if tagged
                else keys.grant_slot_key(brand_id, digest, owner_digest)
            )
            grant_id = await self._redis.execute("GET", slot)
            # The other layout's slot may name the live one: a poll in either supersedes both.
            grant = None if grant_id is None else await self.get_grant(brand_id, grant_id.decode(), now)
            if grant is not None:
                return grant
        return None

    async def grants_of_user(self, brand_id: str, user: str, now: float) -> list[Grant]:
        digest = keys.user_digest(brand_id, user)
        sets = [self._user_grants_key(brand_id, digest, tagged=tagged) for tagged in self._layouts()]
        return await self._indexed(brand_id, sets, now)

    async def grants_of_owner(self, brand_id: str, owner_digest: str, now: float) -> list[Grant]:
        sets = [self._owner_grants_key(brand_id, owner_digest, tagged=tagged) for tagged in self._layouts()]
        return await self._indexed(brand_id, sets, now)

    async def _indexed(self, brand_id: str, index_sets: Sequence[str], now: float) -> list[Grant]:
        """The live grants the sets (one per layout) name, oldest first; the dead ones leave their set."""
        listed: list[list[bytes]] = await asyncio.gather(
            *(self._redis.execute("SMEMBERS", index_set) for index_set in index_sets)
        )
        grant_ids = sorted({member.decode() for members in listed for member in members})
        # Sent together, so the pipe writes them as one batch: one round trip for all of them.
        grants = await asyncio.gather(*(self.get_grant(brand_id, grant_id, now) for grant_id in grant_ids))
        dead = [grant_id for grant_id, grant in zip(grant_ids, grants, strict=True) if grant is None]
        if dead:
            # Safe outside a script: a grant id is never reused, so a dead one never comes back.
            await asyncio.gather(*(self._redis.execute("SREM", index_set, *dead) for index_set in index_sets))
        live = [grant for grant in grants if grant is not None]
        return sorted(live, key=lambda grant: (grant.issued_at, grant.grant_id))

    async def rotate_refresh(
        self,
        brand_id: str,
        presented: RefreshToken,
        new: RefreshToken,
        now: float,
        *,
        grace: float = 0,
        answer: bytes = b"",
    ) -> RefreshResult:
        grant_id = presented.grant_id
        named = [self._refresh_key(brand_id, presented)]
        if grant_id:  # not for a previous release's token: its grace is known once its refresh key is read
            named.append(keys.grace_key(brand_id, grant_id))
        result: list[Any] = await self._redis.run(
            _ROTATE,
            named,
            [
                _time(now),
                keys.grant_key(brand_id, ""),
                presented.family_hash,
                presented.token_hash,
                new.family_hash,
                new.token_hash,
                keys.oauth_key(brand_id, "grace", ""),
                answer if grace > 0 else b"",
                _time(now + grace),
                _ttl_ms(now + grace, now),
                grant_id,
            ],
        )
        outcome = RefreshOutcome(result[0].decode())
        if outcome is RefreshOutcome.RETRIED:
            return RefreshResult(outcome, answer=bytes(result[1]))
        if outcome is not RefreshOutcome.ROTATED:
            return RefreshResult(outcome)
        names = (b"o", b"c", b"u", b"s", b"i", b"e", b"k", b"ad", b"ak")
        fields = dict(zip(names, result[2:], strict=True))
        return RefreshResult(outcome, _grant(brand_id, result[1].decode(), fields))

    @staticmethod
    def _refresh_key(brand_id: str, presented: RefreshToken) -> str:
        """Where ``presented`` is looked up: the grant it names, or a previous release's ``refresh`` key."""
        if presented.grant_id:
            return keys.grant_key(brand_id, presented.grant_id)
        return keys.oauth_key(brand_id, "refresh", presented.token_hash)

    async def grant_of_refresh(self, brand_id: str, presented: RefreshToken, now: float) -> str | None:
        grant_id = presented.grant_id
        if not grant_id:
            legacy = await self._redis.execute("GET", self._refresh_key(brand_id, presented))
            if legacy is None:
                return None
            grant_id = legacy.decode()
        expires, family = await self._redis.execute("HMGET", keys.grant_key(brand_id, grant_id), "e", "f")
        if expires is None or float(expires) <= now:
            return None
        if presented.grant_id and (family is None or family.decode() != presented.family_hash):
            return None
        return grant_id

    async def revoke_grant(self, brand_id: str, grant_id: str) -> bool:
        revoked = await self._redis.run(_REVOKE, [keys.grant_key(brand_id, grant_id)], [_time(self._clock())])
        return bool(revoked)
