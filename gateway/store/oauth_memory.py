"""The §5 flow's state in memory: records in the conversation store's own :class:`MemoryKeyspace`.

One process only (``memory://`` deployments and tests). Sharing the keyspace means one clock
and one sweep, and it is what lets :meth:`gateway.store.memory.MemoryStore.begin_turn` read a
grant where this store keeps it. Every record is a tuple led by its deadline in seconds, as
the sweep expects; nothing is ever deleted here (only the sweep deletes keys): a record that
ends early (a revoked grant, a taken consent session) is expired in place, ``-inf`` first.

Every method reads, decides and writes with no ``await`` in between, so each decision is
atomic against every other coroutine of the process.

The records, by :func:`gateway.store.keys.oauth_key` kind unless said otherwise:

* ``device``: ``(kept until, DeviceAuthorization, previous poll or None)``, kept
  :data:`~gateway.store.oauth.EXPIRED_KEPT` seconds past the authorization's expiry so a late
  poll still hears ``expired_token``;
* ``user_code``: ``(expires, device hash)``;
* ``consent``: ``(expires, ConsentSession)``; ``once``: ``(expires,)``;
* a grant, at :func:`gateway.store.keys.grant_key`: :data:`~gateway.store.memory.GrantRecord`,
  its refresh family inside (the current and previous token hashes: nothing per rotation);
* its slot, at :func:`gateway.store.keys.grant_slot_key`: ``(grant expires, grant id)``;
* ``grace``, by grant id: ``(deadline, previous token hash, sealed answer)``, the last rotation's
  answer for its grace only (the sweep takes it after);
* ``user``: ``(latest grant expiry, {grant id: None})``, the Brand user's grants in issue order,
  a dict so that adding a grant and dropping the one it supersedes cost O(1);
* ``owner``: the same, for the (personal agent, ``sub``) they were issued to, by its owner digest;
* ``owner_authz``: ``(latest expiry, {device hash: expires})``, the live authorizations for one
  (personal agent, ``sub``) in creation order; ``user_authz``: the same, by the Brand user's
  digest, the authorizations they approved in approval order. Each addition first drops the
  lapsed ones from the front: every authorization lives ``expires_in`` seconds, so that costs
  O(1) amortised and the index holds only those of the last ``expires_in`` seconds or so.

Tokens of the previous release do not exist here: memory state does not outlive the process.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Final, TypeAlias

from gateway.store import keys
from gateway.store.base import StoreFull
from gateway.store.memory import GrantRecord, MemoryKeyspace, live_grant
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
    RefreshFamily,
    RefreshOutcome,
    RefreshResult,
    RefreshToken,
)

__all__ = ["MemoryOAuthStore"]

_Device: TypeAlias = tuple[float, DeviceAuthorization, float | None]
FLOW_ENTRIES: Final = 12
"""Entries one authorization's flow may add, reserved when it starts so its later steps find room: its
user code, device record and the owner's index now; later the consent session, landing record and
markers, the grant, its slot, the user's and owner's grant indexes, the user's authorizations, a grace."""


class MemoryOAuthStore(OAuthStore):
    """The §5 records beside a :class:`MemoryStore`; its owner runs the keyspace's sweep and closes it."""

    def __init__(self, keyspace: MemoryKeyspace) -> None:
        self._keyspace = keyspace

    def _live(self, key: str, now: float) -> tuple[Any, ...] | None:
        entry = self._keyspace.entries.get(key)
        return entry if type(entry) is tuple and entry[0] > now else None

    def _device(self, brand_id: str, device_hash: str, now: float) -> _Device | None:
        """The device record, live or within its grace past expiry."""
        entry = self._live(keys.oauth_key(brand_id, "device", device_hash), now)
        return None if entry is None or type(entry[1]) is not DeviceAuthorization else entry

    def _settle(self, brand_id: str, device_hash: str, now: float, **changes: Any) -> bool:
        """Move a live PENDING authorization on with ``changes``; ``False`` (nothing changed) otherwise."""
        device = self._device(brand_id, device_hash, now)
        if device is None:
            return False
        kept, authorization, polled = device
        if authorization.status is not AuthorizationStatus.PENDING or authorization.expires_at <= now:
            return False
        updated = dataclasses.replace(authorization, **changes)
        self._keyspace.entries[keys.oauth_key(brand_id, "device", device_hash)] = (kept, updated, polled)
        return True

    async def create_authorization(self, authorization: DeviceAuthorization) -> bool:
        """Also :class:`StoreFull` when the keyspace is at its bound and nothing may go: the flow's
        records count toward ``cache.max_entries`` like a conversation's (issue 28, L4)."""
        brand_id = authorization.brand_id
        index_key = keys.oauth_key(brand_id, "user_code", authorization.user_code)
        now = self._keyspace.clock()
        if self._live(index_key, now) is not None:
            return False
        if not self._keyspace.room(FLOW_ENTRIES, now):
            raise StoreFull("memory store full: device authorization refused")
        expires = authorization.expires_at
        self._keyspace.put(index_key, (expires, authorization.device_hash))
        device_key = keys.oauth_key(brand_id, "device", authorization.device_hash)
        self._keyspace.put(device_key, (expires + EXPIRED_KEPT, authorization, None))
        owner_key = keys.oauth_key(brand_id, "owner_authz", authorization.owner_digest)
        self._index_authorization(owner_key, authorization.device_hash, expires, self._keyspace.clock())
        return True

    def _index_authorization(self, index_key: str, device_hash: str, expires: float, now: float) -> None:
        """Add a live authorization to an index, after dropping the lapsed ones at its front."""
        index = self._live(index_key, now)
        if index is None:
            self._keyspace.put(index_key, (expires, {device_hash: expires}))
            return
        members: dict[str, float] = index[1]
        while members:
            first = next(iter(members))
            if members[first] > now:
                break
            del members[first]
        members[device_hash] = expires
        self._keyspace.entries[index_key] = (max(index[0], expires), members)

    def _deny_indexed(self, brand_id: str, index_key: str, now: float) -> int:
        """Deny the live PENDING or APPROVED authorizations an index names; the index goes with them."""
        index = self._live(index_key, now)
        if index is None:
            return 0
        denied = 0
        for device_hash in index[1]:
            device = self._device(brand_id, device_hash, now)
            if device is None:
                continue
            kept, authorization, polled = device
            if authorization.status not in (AuthorizationStatus.PENDING, AuthorizationStatus.APPROVED):
                continue
            if authorization.expires_at <= now:
                continue
            # Who approved it and what, forgotten with the approval: an erased person's record keeps none.
            withdrawn = dataclasses.replace(
                authorization,
                status=AuthorizationStatus.DENIED,
                user=None,
                approved=(),
                carried=(),
                approved_details=(),
                carried_details=(),
            )
            self._keyspace.entries[keys.oauth_key(brand_id, "device", device_hash)] = (
                kept,
                withdrawn,
                polled,
            )
            denied += 1
        self._keyspace.entries[index_key] = (-math.inf, index[1])
        return denied

    async def deny_authorizations_of_owner(self, brand_id: str, owner_digest: str, now: float) -> int:
        return self._deny_indexed(brand_id, keys.oauth_key(brand_id, "owner_authz", owner_digest), now)

    async def deny_authorizations_of_user(self, brand_id: str, user: str, now: float) -> int:
        user_key = keys.oauth_key(brand_id, "user_authz", keys.user_digest(brand_id, user))
        return self._deny_indexed(brand_id, user_key, now)

    async def authorization_by_user_code(
        self, brand_id: str, user_code: str, now: float
    ) -> DeviceAuthorization | None:
        index = self._live(keys.oauth_key(brand_id, "user_code", user_code), now)
        if index is None:
            return None
        device = self._device(brand_id, index[1], now)
        if device is None or device[1].expires_at <= now:
            return None
        return device[1]

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
        device_hash = authorization.device_hash
        approved = self._settle(
            brand_id,
            device_hash,
            now,
            status=AuthorizationStatus.APPROVED,
            user=user,
            approved=scopes,
            carried=carried,
            approved_details=details,
            carried_details=carried_details,
        )
        device = self._device(brand_id, device_hash, now) if approved else None
        if device is not None:
            user_key = keys.oauth_key(brand_id, "user_authz", keys.user_digest(brand_id, user))
            self._index_authorization(user_key, device_hash, device[1].expires_at, now)
        return approved

    async def deny(self, brand_id: str, authorization: DeviceAuthorization, now: float) -> bool:
        return self._settle(brand_id, authorization.device_hash, now, status=AuthorizationStatus.DENIED)

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
        device = self._device(brand_id, device_hash, now)
        if device is None or device[1].owner_digest != owner_digest:
            return PollResult(PollOutcome.INVALID_GRANT)
        kept, authorization, polled = device
        if authorization.expires_at <= now:
            return PollResult(PollOutcome.EXPIRED_TOKEN)
        status = authorization.status
        if status is AuthorizationStatus.DENIED:
            return PollResult(PollOutcome.ACCESS_DENIED)
        if status is AuthorizationStatus.REDEEMED:
            return PollResult(PollOutcome.INVALID_GRANT)
        device_key = keys.oauth_key(brand_id, "device", device_hash)
        if polled is not None and now - polled < authorization.interval:
            slower = dataclasses.replace(authorization, interval=authorization.interval + 5)
            self._keyspace.entries[device_key] = (kept, slower, now)
            return PollResult(PollOutcome.SLOW_DOWN)
        if status is AuthorizationStatus.PENDING:
            self._keyspace.entries[device_key] = (kept, authorization, now)
            return PollResult(PollOutcome.AUTHORIZATION_PENDING)
        redeemed = dataclasses.replace(authorization, status=AuthorizationStatus.REDEEMED)
        self._keyspace.entries[device_key] = (kept, redeemed, now)
        user = authorization.user
        assert user is not None  # APPROVED always names its user
        slot_key = keys.grant_slot_key(brand_id, keys.user_digest(brand_id, user), owner_digest)
        slot = self._live(slot_key, now)
        superseded = None if slot is None else slot[1]
        old = None if superseded is None else self._grant(brand_id, superseded, now)
        # Only what the superseded grant still holds now is carried: one revoked since the approval
        # (or replaced by another) hands nothing on.
        held = () if old is None else old[1].scopes
        dropped = {scope for scope in authorization.carried if scope not in held}
        # RFC 9396 details are carried by the same rule as scopes.
        held_details = () if old is None else old[1].details
        dropped_details = {text for text in authorization.carried_details if text not in held_details}
        grant = Grant(
            grant_id=refresh.grant_id,
            brand_id=brand_id,
            client_id=authorization.client_id,
            owner_digest=owner_digest,
            user=user,
            scopes=tuple(scope for scope in authorization.approved if scope not in dropped),
            issued_at=now,
            expires_at=now + grant_ttl,
            carried=tuple(scope for scope in authorization.carried if scope not in dropped),
            details=tuple(text for text in authorization.approved_details if text not in dropped_details),
            carried_details=tuple(
                text for text in authorization.carried_details if text not in dropped_details
            ),
        )
        ended = superseded is not None and self._end(brand_id, superseded, now)
        self._store_grant(grant, RefreshFamily(refresh.family_hash, refresh.token_hash), slot_key, superseded)
        capped = 0 if max_user_grants is None else self._cap(grant, max_user_grants, now)
        return PollResult(PollOutcome.ISSUED, grant, ended, capped)

    def _cap(self, grant: Grant, most: int, now: float) -> int:
        """Revoke the user's oldest live grants past ``most`` (``grant``, just stored, is the newest).

        Their index is in issue order; the dead ones met on the way leave it, so the look is in
        proportion to what it removes, plus at most ``most`` live ones."""
        brand_id = grant.brand_id
        index = self._live(keys.oauth_key(brand_id, "user", keys.user_digest(brand_id, grant.user)), now)
        if index is None or len(index[1]) <= most:
            return 0
        ids: dict[str, None] = index[1]
        capped = 0
        for grant_id in list(ids):
            if len(ids) <= most:
                break
            if grant_id != grant.grant_id:
                capped += self._end(brand_id, grant_id, now)
                del ids[grant_id]
        return capped

    def _store_grant(
        self, grant: Grant, family: RefreshFamily, slot_key: str, superseded: str | None
    ) -> None:
        """Store ``grant`` in its (user, owner) slot, in place of the ``superseded`` one (§5.3)."""
        brand_id, expires, now = grant.brand_id, grant.expires_at, grant.issued_at
        record: GrantRecord = (expires, grant, family)
        self._keyspace.put(keys.grant_key(brand_id, grant.grant_id), record)
        self._keyspace.put(slot_key, (expires, grant.grant_id))
        for index_key in (
            keys.oauth_key(brand_id, "user", keys.user_digest(brand_id, grant.user)),
            keys.oauth_key(brand_id, "owner", grant.owner_digest),
        ):
            index = self._live(index_key, now)
            if index is None:
                self._keyspace.put(index_key, (expires, {grant.grant_id: None}))
                continue
            ids: dict[str, None] = index[1]
            ids.pop(superseded or "", None)
            ids[grant.grant_id] = None
            if expires > index[0]:
                self._keyspace.put(index_key, (expires, ids))

    def _end(self, brand_id: str, grant_id: str, now: float) -> bool:
        """Revoke a live grant in place (expired, ``-inf``): its refresh family and tokens die with it."""
        key = keys.grant_key(brand_id, grant_id)
        record = live_grant(self._keyspace.entries.get(key), now)
        if record is None:
            return False
        self._keyspace.entries[key] = (-math.inf, record[1], record[2])
        return True

    async def put_consent_session(self, brand_id: str, session_hash: str, session: ConsentSession) -> None:
        self._keyspace.put(keys.oauth_key(brand_id, "consent", session_hash), (session.expires_at, session))

    async def take_consent_session(
        self, brand_id: str, session_hash: str, now: float
    ) -> ConsentSession | None:
        key = keys.oauth_key(brand_id, "consent", session_hash)
        entry = self._live(key, now)
        if entry is None:
            return None
        self._keyspace.entries[key] = (-math.inf, entry[1])
        session: ConsentSession = entry[1]
        return session

    async def put_landing(self, brand_id: str, record_hash: str, record: LandingRecord) -> None:
        self._keyspace.put(keys.oauth_key(brand_id, "landing", record_hash), (record.expires_at, record))

    async def take_landing(self, brand_id: str, record_hash: str, now: float) -> LandingRecord | None:
        key = keys.oauth_key(brand_id, "landing", record_hash)
        entry = self._live(key, now)
        if entry is None:
            return None
        self._keyspace.entries[key] = (-math.inf, entry[1])
        record: LandingRecord = entry[1]
        return record

    async def use_once(self, brand_id: str, marker: str, ttl: float) -> bool:
        key = keys.oauth_key(brand_id, "once", marker)
        now = self._keyspace.clock()
        if self._live(key, now) is not None:
            return False
        self._keyspace.put(key, (now + ttl,))
        return True

    def _grant(self, brand_id: str, grant_id: str, now: float) -> GrantRecord | None:
        return live_grant(self._keyspace.entries.get(keys.grant_key(brand_id, grant_id)), now)

    async def get_grant(self, brand_id: str, grant_id: str, now: float) -> Grant | None:
        record = self._grant(brand_id, grant_id, now)
        return None if record is None else record[1]

    async def live_grant_of(self, brand_id: str, user: str, owner_digest: str, now: float) -> Grant | None:
        slot = self._live(keys.grant_slot_key(brand_id, keys.user_digest(brand_id, user), owner_digest), now)
        return None if slot is None else await self.get_grant(brand_id, slot[1], now)

    async def grants_of_user(self, brand_id: str, user: str, now: float) -> list[Grant]:
        user_key = keys.oauth_key(brand_id, "user", keys.user_digest(brand_id, user))
        return self._indexed(brand_id, user_key, now)

    async def grants_of_owner(self, brand_id: str, owner_digest: str, now: float) -> list[Grant]:
        return self._indexed(brand_id, keys.oauth_key(brand_id, "owner", owner_digest), now)

    def _indexed(self, brand_id: str, index_key: str, now: float) -> list[Grant]:
        """The live grants an index names, oldest first; the dead ones leave the index."""
        index = self._live(index_key, now)
        if index is None:
            return []
        ids: dict[str, None] = index[1]
        records = [(grant_id, self._grant(brand_id, grant_id, now)) for grant_id in ids]
        live = [record[1] for _, record in records if record is not None]
        for grant_id, record in records:
            if record is None:
                del ids[grant_id]
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
        record = self._family_record(brand_id, presented, now)
        if record is None:
            return RefreshResult(RefreshOutcome.INVALID)
        expires, grant, family = record
        grace_key = keys.oauth_key(brand_id, "grace", grant.grant_id)
        if presented.token_hash != family.current:
            kept = self._live(grace_key, now) if presented.token_hash == family.previous else None
            if kept is not None and kept[1] == presented.token_hash:
                # The answer to this very token was lost: the same answer again (issue 18 I2).
                sealed: bytes = kept[2]
                return RefreshResult(RefreshOutcome.RETRIED, answer=sealed)
            # A spent token of the family came back: someone holds a copy, so neither copy may go on
            # (RFC 9700 §4.14.2). The previous token or an older one: the family knows no more.
            self._end(brand_id, grant.grant_id, now)
            return RefreshResult(RefreshOutcome.REUSED)
        rotated = RefreshFamily(family.family_hash, new.token_hash, presented.token_hash)
        self._keyspace.entries[keys.grant_key(brand_id, grant.grant_id)] = (expires, grant, rotated)
        # The previous rotation's answer goes either way: its token is older than the previous now.
        if grace > 0:
            self._keyspace.put(grace_key, (now + grace, presented.token_hash, answer))
        elif grace_key in self._keyspace.entries:
            self._keyspace.entries[grace_key] = (-math.inf,)
        return RefreshResult(RefreshOutcome.ROTATED, grant)

    def _family_record(self, brand_id: str, presented: RefreshToken, now: float) -> GrantRecord | None:
        """The live grant ``presented`` names, if ``presented`` is of its family."""
        if not presented.grant_id:
            return None
        record = self._grant(brand_id, presented.grant_id, now)
        if record is None or record[2].family_hash != presented.family_hash:
            return None
        return record

    async def grant_of_refresh(self, brand_id: str, presented: RefreshToken, now: float) -> str | None:
        record = self._family_record(brand_id, presented, now)
        return None if record is None else record[1].grant_id

    async def revoke_grant(self, brand_id: str, grant_id: str) -> bool:
        return self._end(brand_id, grant_id, self._keyspace.clock())
