"""The token endpoint (§5.3): RFC 8628 §3.4 device-code redemption and RFC 6749 §6 refresh.

Every decision that must hold across replicas is one atomic step of the store: a device code
is redeemed once however many polls race for it, and a refresh token rotates once however
many refreshes race for it (the losers present a spent token, which revokes the grant: RFC
9700 §4.14.2 reuse detection). A refresh token is ``rt_{grant id}.{family}.{secret}``: the
family (128 random bits, drawn when the grant is issued) stays with every rotation and the
secret (256 bits) changes, so the store keeps one record per family, the hashes of the current
and previous token, however often a client refreshes, and still knows any older token of the
family as spent. Tokens are handed out once and stored only as hashes. A grant and its refresh
tokens belong to one (personal agent, ``sub``): another personal agent, or another ``sub`` of
the same one, gets ``invalid_grant`` and changes nothing.

A client whose refresh answer was lost can only present the token it sent again, which is now
the previous one: RFC 9700 §4.14.2 allows a short grace for that. For ``delegation.refresh_grace``
seconds after a rotation, the previous token gets the *same* answer again (same access and
refresh token: a client that got the first answer after all, and one that did not, hold one
pair); after it, reuse revokes the grant as before. The answer is kept for those seconds only,
sealed (AES-256-GCM) under a key derived (HKDF-SHA256) from the presented refresh token itself,
which the store holds only as a SHA-256 hash: whoever reads the store learns nothing of the new
tokens, and only a holder of the previous token can open the answer, which is exactly who the
grace serves. Nothing else is derivable: the access token is an ES256 JWT with a random ``jti``,
so it cannot be minted again identically; it must be kept.
"""

from __future__ import annotations

import logging
import re
import secrets
from typing import Final

import orjson
from aiohttp import web

from gateway.handlers.oauth.client_auth import Client, pa_client
from gateway.handlers.state import METRICS
from gateway.oauth.access_token import mint_access_token
from gateway.oauth.authorization_details import PARAMETER, granted_details, narrowed_details
from gateway.oauth.device import code_hash
from gateway.oauth.errors import ErrorCode, OAuthError, json_answer
from gateway.oauth.forms import parse_scope, required
from gateway.oauth.metadata import DEVICE_CODE_GRANT, REFRESH_TOKEN_GRANT
from gateway.protocol.authorization_details import details_json
from gateway.sealing import open_sealed, seal, sealing_key
from gateway.store.keys import GRANT_ID_PREFIX
from gateway.store.oauth import Grant, PollOutcome, RefreshOutcome, RefreshToken

__all__ = [
    "GRANT_ID_PREFIX",
    "REFRESH_TOKEN_PREFIX",
    "new_family",
    "new_refresh_token",
    "open_answer",
    "owns",
    "refresh_token_of",
    "seal_answer",
    "token",
]

log = logging.getLogger("pact_gateway.oauth")

REFRESH_TOKEN_PREFIX: Final = "rt_"  # noqa: S105 - a prefix, not a secret

_POLL_ERRORS: Final = {
    PollOutcome.INVALID_GRANT: ErrorCode.INVALID_GRANT,
    PollOutcome.EXPIRED_TOKEN: ErrorCode.EXPIRED_TOKEN,
    PollOutcome.ACCESS_DENIED: ErrorCode.ACCESS_DENIED,
    PollOutcome.SLOW_DOWN: ErrorCode.SLOW_DOWN,
    PollOutcome.AUTHORIZATION_PENDING: ErrorCode.AUTHORIZATION_PENDING,
}
"""RFC 8628 §3.5: every poll outcome but success is a ``400`` with its own code."""


_FAMILY_TOKEN: Final = re.compile(
    rf"{REFRESH_TOKEN_PREFIX}(?P<grant>{GRANT_ID_PREFIX}(?:[0-9a-f]{{8}})?[A-Za-z0-9_-]{{22}})\.(?P<family>[A-Za-z0-9_-]{{22}})"
    r"\.[A-Za-z0-9_-]{43}"
)
"""What :func:`new_refresh_token` draws; anything else is looked up as a previous release's token."""


def new_family() -> str:
    """A refresh family: 128 random bits, in every token of one grant; only its hash is stored."""
    return secrets.token_urlsafe(16)


def new_refresh_token(grant_id: str, family: str) -> tuple[str, RefreshToken]:
    """A token of ``family`` (256 fresh random bits), and what the store keeps of it (hashes only)."""
    token = f"{REFRESH_TOKEN_PREFIX}{grant_id}.{family}.{secrets.token_urlsafe(32)}"
    return token, RefreshToken(grant_id, code_hash(family), code_hash(token))


def refresh_token_of(token: str) -> tuple[RefreshToken, str]:
    """A presented refresh token as the store sees it, and its family (``""`` when it names none).

    A token that is not of :func:`new_refresh_token`'s shape names no grant: the store looks it up
    by hash only, which finds the previous release's tokens (``rt_`` and 256 random bits) and
    nothing else, so a made-up grant id never reaches a key.
    """
    shaped = _FAMILY_TOKEN.fullmatch(token)
    if shaped is None:
        return RefreshToken("", "", code_hash(token)), ""
    family = shaped["family"]
    return RefreshToken(shaped["grant"], code_hash(family), code_hash(token)), family


def owns(grant: Grant, client: Client) -> bool:
    """Whether ``grant`` belongs to the calling personal agent and its ``sub`` (§5.3 binding)."""
    return grant.client_id == client.identity.issuer and grant.owner_digest == client.owner_digest


_GRACE_INFO: Final = b"pact-gateway refresh grace answer v1"


def seal_answer(refresh_token: str, grant_id: str, answer: bytes) -> bytes:
    """``answer`` sealed for whoever presents ``refresh_token`` again (bound to ``grant_id``): under a
    key only ``refresh_token`` yields (the store keeps its SHA-256, not this)."""
    return seal(sealing_key(refresh_token, _GRACE_INFO), grant_id.encode(), answer)


def open_answer(refresh_token: str, grant_id: str, sealed: bytes) -> bytes | None:
    """What :func:`seal_answer` sealed, or ``None`` if ``sealed`` is not for this token and grant."""
    return open_sealed(sealing_key(refresh_token, _GRACE_INFO), grant_id.encode(), sealed)


def _answer(
    client: Client,
    grant: Grant,
    scopes: tuple[str, ...],
    refresh_token: str,
    details: tuple[str, ...],
) -> bytes:
    """The §5.3 success answer: a fresh access token for ``scopes`` and the grant's new refresh token.

    RFC 9396 §7: ``details`` (canonical JSON, those of the grant the token carries) go in the
    answer and in the token's claim as they are, the bytes the User approved; none, no member.
    """
    brand = client.brand
    access_token, expires_in = mint_access_token(
        client.server.keys,
        grant,
        issuer=brand.urls.issuer,
        audience=brand.urls.interface,
        scopes=scopes,
        now=client.server.clock(),
        ttl=brand.delegation.token_ttl,
        authorization_details=details,
    )
    answer: dict[str, object] = {
        "token_type": "Bearer",
        "access_token": access_token,
        "refresh_token": refresh_token,
        "expires_in": expires_in,
        "scope": " ".join(scopes),
    }
    if details:
        answer[PARAMETER] = details_json(details)
    return orjson.dumps(answer)


async def _redeem_device_code(request: web.Request, client: Client) -> web.Response:
    """RFC 8628 §3.4–3.5: one poll, decided by the store in the documented order."""
    brand = client.brand
    brand_id = brand.brand.id
    grant_id = client.server.store.new_grant_id(client.owner_digest)
    refresh_token, refresh = new_refresh_token(grant_id, new_family())
    result = await client.server.store.poll(
        brand_id,
        code_hash(required(client.form, "device_code")),
        client.owner_digest,
        client.server.clock(),
        refresh=refresh,
        grant_ttl=brand.delegation.grant_ttl,
        max_user_grants=brand.delegation.max_grants_per_user,
    )
    metrics = request.app[METRICS]
    if result.outcome is not PollOutcome.ISSUED or result.grant is None:
        if result.outcome is PollOutcome.EXPIRED_TOKEN:
            metrics.delegation_event(brand_id, "authorization_expired")
        raise OAuthError(_POLL_ERRORS.get(result.outcome, ErrorCode.INVALID_GRANT))
    metrics.delegation_event(brand_id, "token_issued")
    if result.superseded:
        # §5.3: one live grant per (user, agent, sub); the earlier one's tokens stop from now on.
        metrics.delegation_event(brand_id, "grant_superseded")
    for _ in range(result.capped):
        # delegation.max_grants_per_user: the user's oldest grant made way for this one.
        metrics.delegation_event(brand_id, "grant_superseded")
    grant = result.grant
    details = granted_details(grant.details, brand.delegation, grant.scopes)
    return json_answer(_answer(client, grant, grant.scopes, refresh_token, details))


async def _refresh(request: web.Request, client: Client) -> web.Response:
    """RFC 6749 §6 with rotation: a new access token (narrowed by ``scope`` if asked) and refresh token.

    Ownership and the narrowing are checked before the store rotates anything, so a foreign or
    malformed request spends nothing; a narrower ``scope`` limits only this access token (the
    grant keeps what the User approved, RFC 6749 §6), and drops the RFC 9396 details of the
    scopes it leaves out; ``authorization_details`` narrows the details too, never widens them
    (:func:`~gateway.oauth.authorization_details.narrowed_details`). The new token is of the
    presented one's family; a previous release's token, which has none, starts its grant's family.

    The answer is made before the rotation, so that the store keeps it, sealed, in the same
    step for ``refresh_grace`` seconds; the previous token presented within them gets it again
    whatever the retry asks (it is the same request, retried).
    """
    brand = client.brand
    brand_id = brand.brand.id
    store, now = client.server.store, client.server.clock()
    presented_token = required(client.form, "refresh_token")
    presented, family = refresh_token_of(presented_token)
    grant_id = await store.grant_of_refresh(brand_id, presented, now)
    grant = None if grant_id is None else await store.get_grant(brand_id, grant_id, now)
    if grant is None or not owns(grant, client):
        raise OAuthError(ErrorCode.INVALID_GRANT)
    scope = client.form.get("scope")
    scopes = grant.scopes if scope is None else parse_scope(scope, grant.scopes)
    try:
        details = narrowed_details(client.form.get(PARAMETER), brand.delegation, grant.details, scopes)
    except OAuthError:
        request.app[METRICS].delegation_event(brand_id, "authorization_details_refused")
        raise
    refresh_token, refresh = new_refresh_token(grant.grant_id, family or new_family())
    answer = _answer(client, grant, scopes, refresh_token, details)
    grace = brand.delegation.refresh_grace
    sealed = seal_answer(presented_token, grant.grant_id, answer) if grace else b""
    result = await store.rotate_refresh(brand_id, presented, refresh, now, grace=grace, answer=sealed)
    metrics = request.app[METRICS]
    if result.outcome is RefreshOutcome.RETRIED:
        earlier = open_answer(presented_token, grant.grant_id, result.answer)
        if earlier is None:  # only a store that returned something else than it kept
            raise OAuthError(ErrorCode.INVALID_GRANT)
        metrics.delegation_event(brand_id, "refresh_retried")
        return json_answer(earlier)
    if result.outcome is RefreshOutcome.REUSED:
        # The store revoked the grant in the same step: whoever holds the newest token loses it too.
        metrics.delegation_event(brand_id, "refresh_reuse_detected")
        log.warning(
            "spent refresh token presented: grant revoked", extra={"brand": brand_id, "grant_id": grant_id}
        )
        raise OAuthError(ErrorCode.INVALID_GRANT)
    if result.outcome is not RefreshOutcome.ROTATED or result.grant is None:
        raise OAuthError(ErrorCode.INVALID_GRANT)
    metrics.delegation_event(brand_id, "token_refreshed")
    return json_answer(answer)


@pa_client
async def token(request: web.Request, client: Client) -> web.Response:
    """``POST {interface}/oauth/token`` (§5.3): ``grant_type`` picks the device-code poll or a refresh."""
    grant_type = required(client.form, "grant_type")
    if grant_type == DEVICE_CODE_GRANT:
        return await _redeem_device_code(request, client)
    if grant_type == REFRESH_TOKEN_GRANT:
        return await _refresh(request, client)
    raise OAuthError(ErrorCode.UNSUPPORTED_GRANT_TYPE)
