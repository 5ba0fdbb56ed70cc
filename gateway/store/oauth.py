"""The §5 flow's state behind one interface, kept beside the conversations (memory or Redis).

What is kept, each with its own lifetime and never a secret in clear:

* **device authorizations** (RFC 8628), by the SHA-256 of their ``device_code``, with an
  index from their ``user_code``; they live ``expires_in`` seconds. The live ones are also
  indexed by the (personal agent, ``sub``) they are for and, once approved, by the Brand user
  who approved them, so erasing that person or revoking that user's grants denies them too
  (an approved authorization is a grant in waiting: the next poll would mint it). Each entry
  leaves its index once its authorization expires, so an index holds at most the
  authorizations of the last ``expires_in`` seconds;
* **consent sessions**: the consent page's hidden ``session``, by its hash, single use;
* **landing records**: what the landing page after a consent decision says, by the hash of an
  unguessable id in its URL, single use and short-lived (the page never believes its query string);
* **used assertion ``jti``s** (the Brand login's hand-off), single use, kept until the
  assertion could no longer be valid;
* **grants**: what a User approved for one personal agent (and one of its ``sub``s); they live
  ``grant_ttl`` seconds. At most one is live per (Brand user, personal agent, ``sub``): a *slot*
  names it, and the grant a new approval creates supersedes (revokes) the one the slot named,
  in the same step, recording which scopes it carried over;
* **a grant's refresh family**, in the grant's own record: the family's hash and the hashes of
  the current and the previous refresh token. Every token of the family names its grant and
  family, so any token of it but the current one is recognised as spent (and revokes the
  grant: reuse detection, RFC 9700 §4.14.2) without keeping a record per token ever issued;
* **a rotation's sealed answer**, for ``delegation.refresh_grace`` seconds after it: the token
  endpoint's answer (the new access and refresh tokens), encrypted under a key only the
  presented refresh token yields (:mod:`gateway.handlers.oauth.tokens`), so a client whose answer was
  lost and that presents the previous token again gets that same answer, not a revoked grant.

Every decision that must hold across replicas is one atomic step of the backend: redeeming
a device code, rotating a refresh token, taking a consent session, using a ``jti``.
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from gateway.store import keys

__all__ = [
    "EXPIRED_KEPT",
    "AuthorizationStatus",
    "ConsentSession",
    "DeviceAuthorization",
    "Grant",
    "LandingRecord",
    "OAuthStore",
    "PollOutcome",
    "PollResult",
    "RefreshFamily",
    "RefreshOutcome",
    "RefreshResult",
    "RefreshToken",
]

EXPIRED_KEPT = 600
"""Seconds a device authorization is still kept past its ``expires_at``, so that a late poll hears
``expired_token`` (RFC 8628 §3.5) rather than ``invalid_grant``; the backends forget it after that."""


class AuthorizationStatus(Enum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    REDEEMED = "redeemed"


@dataclass(frozen=True, slots=True)
class DeviceAuthorization:
    """One RFC 8628 device authorization, bound to the personal agent *and* its ``sub`` (§5.3)."""

    device_hash: str
    """Hex SHA-256 of the ``device_code``: the code itself is never stored."""
    user_code: str
    brand_id: str
    client_id: str
    """The personal agent's issuer (§5: ``client_id`` is its issuer URL)."""
    owner_digest: str
    """:attr:`gateway.store.base.Owner.digest` of (Brand, PA issuer, PA ``sub``)."""
    scopes: tuple[str, ...]
    """Requested, in the card's order."""
    expires_at: float
    interval: int
    """Seconds the personal agent must leave between polls; raised by 5 on each ``slow_down``."""
    status: AuthorizationStatus = AuthorizationStatus.PENDING
    user: str | None = None
    """The Brand user id, once approved."""
    approved: tuple[str, ...] = ()
    """The scopes the grant will carry, once approved."""
    carried: tuple[str, ...] = ()
    """Those of :attr:`approved` that come from the User's live grant this one will supersede, not
    from this request (§5.3 step-up): kept with the grant so the User can be shown them."""
    details: tuple[str, ...] = ()
    """RFC 9396 ``authorization_details`` requested, each as its canonical JSON
    (:mod:`gateway.protocol.authorization_details`), in request order."""
    approved_details: tuple[str, ...] = ()
    """The details the grant will carry, once approved: those of the approved scopes."""
    carried_details: tuple[str, ...] = ()
    """Those of :attr:`approved_details` that come from the grant this one will supersede."""


@dataclass(frozen=True, slots=True)
class ConsentSession:
    """The consent page's hidden ``session``: which authorization, shown to which logged-in User."""

    device_hash: str
    user: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class LandingRecord:
    """What the User just decided on the consent page, for the landing page to say (§5.3).

    Kept server-side so the landing page states only what the gateway did: a link cannot make
    the gateway's page claim a grant that does not exist.
    """

    outcome: str
    """``approved``, ``denied`` or ``nothing_ticked`` (Allow pressed with no requested scope ticked)."""
    scopes: tuple[str, ...]
    """Approved: every scope of the new grant. Otherwise the scopes of the User's earlier live grant
    for this personal agent, which still stands (empty when there is none)."""
    carried: tuple[str, ...]
    """Approved: those of :attr:`scopes` kept from the earlier grant."""
    dropped: tuple[str, ...]
    """Approved: scopes of the earlier grant the User unticked, which the new grant does not carry."""
    expires_at: float
    details: tuple[str, ...] = ()
    """RFC 9396 details, as :attr:`scopes` (canonical JSON each)."""
    carried_details: tuple[str, ...] = ()
    dropped_details: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Grant:
    """What a Brand user approved for one personal agent and one of its ``sub``s (§5.4 ``grant_id``)."""

    grant_id: str
    brand_id: str
    client_id: str
    owner_digest: str
    """The (Brand, PA issuer, PA ``sub``) the grant belongs to, as :attr:`Owner.digest`."""
    user: str
    scopes: tuple[str, ...]
    issued_at: float
    expires_at: float
    carried: tuple[str, ...] = ()
    """Which of :attr:`scopes` were carried over from the grant this one superseded (§5.3 step-up)."""
    details: tuple[str, ...] = ()
    """The RFC 9396 ``authorization_details`` the User approved (canonical JSON each), conditions of
    :attr:`scopes`; none for a grant written before they existed."""
    carried_details: tuple[str, ...] = ()
    """Which of :attr:`details` were carried over from the grant this one superseded."""


class RefreshToken(NamedTuple):
    """A refresh token as the store sees it: hashes, and the grant it names (never the token itself).

    A token is ``rt_{grant id}.{family}.{secret}`` (:mod:`gateway.handlers.oauth.tokens`): the grant id
    finds the record, the family proves the holder once held a token of that grant (a grant id
    is not a secret: it is in every receipt), the whole token's hash says which one.
    """

    grant_id: str
    """``""`` for a token of the previous release (``rt_`` and 256 random bits), found by its hash."""
    family_hash: str
    """Hash of the family part; ``""`` with ``grant_id``."""
    token_hash: str
    """Hash of the whole token."""


class RefreshFamily(NamedTuple):
    """A grant's refresh family: all the store keeps of its tokens, however often they rotate."""

    family_hash: str
    current: str
    """Hash of the token that rotates next."""
    previous: str = ""
    """Hash of the token it replaced (``""`` before the first rotation)."""


class PollOutcome(Enum):
    """RFC 8628 §3.5 answers to a token poll, plus the success."""

    INVALID_GRANT = "invalid_grant"
    EXPIRED_TOKEN = "expired_token"  # noqa: S105 - an RFC 8628 error code
    ACCESS_DENIED = "access_denied"
    SLOW_DOWN = "slow_down"
    AUTHORIZATION_PENDING = "authorization_pending"
    ISSUED = "issued"


class PollResult(NamedTuple):
    outcome: PollOutcome
    grant: Grant | None = None
    """``ISSUED``: the grant this redemption created."""
    superseded: bool = False
    """``ISSUED``: a live grant of the same (user, personal agent, ``sub``) was revoked for it."""
    capped: int = 0
    """``ISSUED``: the user's oldest live grants revoked for it, past ``max_user_grants``."""


class RefreshOutcome(Enum):
    ROTATED = "rotated"
    INVALID = "invalid"
    """Unknown refresh token, or its grant expired or was revoked."""
    REUSED = "reused"
    """A spent refresh token of a live grant: the grant has been revoked in the same step."""
    RETRIED = "retried"
    """The previous refresh token, within the grace of the rotation that spent it: nothing changed,
    and :attr:`RefreshResult.answer` is that rotation's sealed answer."""


class RefreshResult(NamedTuple):
    outcome: RefreshOutcome
    grant: Grant | None = None
    """``ROTATED``: the grant, unchanged but for its current refresh token."""
    answer: bytes = b""
    """``RETRIED``: the sealed answer the rotation kept."""


class OAuthStore(ABC):
    """One interface, two backends (``oauth_memory``, ``oauth_redis``), opened beside the conversation store.

    ``now`` is always passed in (wall-clock seconds), so tests and replicas decide with the
    caller's clock. Every method raises :class:`gateway.store.base.StoreError` when the backend fails.
    """

    tags_grant_ids = True
    """Whether :meth:`new_grant_id` puts the owner's tag in the ids it draws (issue 20): not under
    ``cache.key_layout: previous``, whose ids the previous release must still read."""

    def new_grant_id(self, owner_digest: str) -> str:
        """§5.4 ``grant_id`` for a grant of ``owner_digest``: opaque and unguessable (it appears in
        receipts, so it is not a secret), and carrying the owner's tag so that
        :func:`gateway.store.keys.grant_key` keeps the grant in its owner's slot."""
        tag = keys.owner_tag(owner_digest) if self.tags_grant_ids else ""
        return keys.GRANT_ID_PREFIX + tag + secrets.token_urlsafe(16)

    @abstractmethod
    async def create_authorization(self, authorization: DeviceAuthorization) -> bool:
        """Store a new pending authorization until its ``expires_at``; ``False`` if its ``user_code``
        is already in use for this Brand (the caller draws another)."""

    @abstractmethod
    async def authorization_by_user_code(
        self, brand_id: str, user_code: str, now: float
    ) -> DeviceAuthorization | None:
        """The live authorization ``user_code`` names, with its current status; ``None`` once expired."""

    @abstractmethod
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
        """PENDING and live → APPROVED for ``user`` with ``scopes`` (``carried`` of them from the grant
        the new one will supersede) and the RFC 9396 ``details`` (canonical JSON each,
        ``carried_details`` of them from that grant); ``False`` (nothing changed) otherwise.
        ``authorization`` is as :meth:`authorization_by_user_code` read it: its device hash, owner
        and expiry find and index it; its status is decided again by the store."""

    @abstractmethod
    async def deny(self, brand_id: str, authorization: DeviceAuthorization, now: float) -> bool:
        """PENDING and live → DENIED; ``False`` (nothing changed) otherwise (``authorization`` as for
        :meth:`approve`)."""

    @abstractmethod
    async def deny_authorizations_of_owner(self, brand_id: str, owner_digest: str, now: float) -> int:
        """Deny every live PENDING or APPROVED authorization for one (personal agent, ``sub``), forgetting
        the Brand user and scopes an approval recorded; how many were denied. Their next poll hears
        ``access_denied`` (RFC 8628 §3.5): what erasing that person does (gateway/process/erasure.py)."""

    @abstractmethod
    async def deny_authorizations_of_user(self, brand_id: str, user: str, now: float) -> int:
        """The same for every live authorization ``user`` approved and no poll has redeemed yet: what
        revoking all of a Brand user's grants does (``grants revoke``)."""

    @abstractmethod
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
        """One token poll (RFC 8628 §3.4–3.5), decided in one atomic step, in this order:

        unknown code, or one bound to another ``owner_digest`` → ``INVALID_GRANT``; expired →
        ``EXPIRED_TOKEN``; denied → ``ACCESS_DENIED``; already redeemed → ``INVALID_GRANT``; a
        poll less than ``interval`` seconds after the previous poll of this code → ``SLOW_DOWN``
        (and the interval grows by 5 s for good); still pending → ``AUTHORIZATION_PENDING``.
        The first poll is never too early. Every poll that gets past the redeemed check is
        recorded as the previous poll.

        Approved → ``ISSUED``: the authorization becomes REDEEMED and the grant ``refresh.grant_id``
        (its user, approved and carried scopes, client and owner; ``issued_at`` = ``now``,
        ``expires_at`` = ``now + grant_ttl``) is stored with ``refresh`` as the first token of its
        family, in the same step, so two concurrent polls never both get a token. In that same
        step the grant takes the slot of (user, owner): the live grant the slot named before is
        revoked (superseded), so a (Brand user, personal agent, ``sub``) has one live grant at most.
        Of the approval's carried scopes, only those that grant still holds are granted (and
        recorded as carried): a grant revoked between approval and redemption hands nothing on.
        The approval's RFC 9396 details are granted by the same rule: its carried details only
        if that grant still holds them (byte-equal canonical JSON).
        Past ``max_user_grants`` live grants of the user at the Brand (``None``: no cap), the
        oldest are revoked too (superseded, counted in ``capped``), so one Brand account cannot
        pile up grants by delegating to fresh ``sub`` after fresh ``sub`` (issue 28, L4).
        """

    @abstractmethod
    async def put_consent_session(self, brand_id: str, session_hash: str, session: ConsentSession) -> None:
        """Keep ``session`` until its ``expires_at``."""

    @abstractmethod
    async def take_consent_session(
        self, brand_id: str, session_hash: str, now: float
    ) -> ConsentSession | None:
        """The live session, removed in the same step: a second take gets ``None``."""

    @abstractmethod
    async def put_landing(self, brand_id: str, record_hash: str, record: LandingRecord) -> None:
        """Keep ``record`` until its ``expires_at``."""

    @abstractmethod
    async def take_landing(self, brand_id: str, record_hash: str, now: float) -> LandingRecord | None:
        """The live record, removed in the same step: a second take gets ``None``."""

    @abstractmethod
    async def use_once(self, brand_id: str, marker: str, ttl: float) -> bool:
        """``True`` the first time ``marker`` (a hash) is used within ``ttl`` seconds, ``False`` after."""

    @abstractmethod
    async def get_grant(self, brand_id: str, grant_id: str, now: float) -> Grant | None:
        """The live grant, or ``None`` (unknown, expired or revoked)."""

    @abstractmethod
    async def live_grant_of(self, brand_id: str, user: str, owner_digest: str, now: float) -> Grant | None:
        """The live grant of ``user`` for one (personal agent, ``sub``), read from its slot: what consent
        needs (skipping, carried scopes), at a cost that does not grow with the user's other grants."""

    @abstractmethod
    async def grants_of_user(self, brand_id: str, user: str, now: float) -> list[Grant]:
        """Every live grant of a Brand user, oldest first (``grants list`` / ``revoke``)."""

    @abstractmethod
    async def grants_of_owner(self, brand_id: str, owner_digest: str, now: float) -> list[Grant]:
        """Every live grant issued to one (personal agent, ``sub``), as :attr:`Grant.owner_digest`, oldest
        first: what erasing that person revokes (gateway/process/erasure.py)."""

    @abstractmethod
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
        """Refresh-token rotation in one atomic step (RFC 9700 §4.14.2), for a live grant only:

        ``presented`` of another family than the grant's (or naming no live grant) is ``INVALID``
        and changes nothing; the family's current token → ``ROTATED``: ``new`` becomes current and
        ``presented`` previous, and with a ``grace`` the sealed ``answer`` is kept, bound to
        ``presented``, until ``now + grace`` (the one a rotation before kept goes); the previous
        token while the answer its rotation kept is live (``now`` before its deadline) →
        ``RETRIED`` with that answer, and nothing changes; any other token of the family (the
        previous one after that, or an older one) → ``REUSED``, and the grant is revoked. A token
        of the previous release (``grant_id`` ``""``) is found by its hash; if current, its grant
        moves to ``new``'s family (which names that grant) and its other old tokens are spent
        from then on."""

    @abstractmethod
    async def grant_of_refresh(self, brand_id: str, presented: RefreshToken, now: float) -> str | None:
        """The id of the live grant whose family ``presented`` belongs to (current or spent)."""

    @abstractmethod
    async def revoke_grant(self, brand_id: str, grant_id: str) -> bool:
        """End the grant now, on every replica: its tokens stop working on their next use."""
