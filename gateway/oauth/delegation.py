"""§5.5 the ``X-A2A-User-Delegation`` header: the one call the turn handler makes to verify it.

The personal-agent JWT has been verified first, unchanged (§5.5); this checks the second
token against *this* Brand: a §5.4 token the Provider signed, ``iss`` the Brand's authorization
server, ``aud`` its interface URL, ``exp`` not reached, and ``client_id`` the personal agent that
sends it. Whether its grant is still live is decided by the turn's own store step
(:class:`gateway.store.base.GrantCheck`), so a revoked grant stops the next turn on every replica.

A personal agent reuses a token for up to an hour, so verdicts are cached by the token's
digest, like the personal-agent JWT's (:mod:`gateway.auth.token_cache`), and used strictly
before ``exp``. One verifier belongs to one runtime (one set of Provider keys): a reload that
rotates the keys builds a new verifier, so no verdict outlives the key that signed its token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gateway.auth.pa_jwt import AuthFailure, bearer_token
from gateway.auth.token_cache import TokenCache
from gateway.config import BrandConfig
from gateway.oauth.access_token import DelegationClaims, InvalidToken, verify_access_token
from gateway.oauth.server import AuthorizationServer
from gateway.protocol.urls import OAuthUrls
from gateway.store import keys
from gateway.store.base import GrantCheck

__all__ = ["DELEGATION_HEADER", "Delegation", "DelegationVerifier", "InvalidToken"]

DELEGATION_HEADER: Final = "X-A2A-User-Delegation"


@dataclass(frozen=True, slots=True)
class Delegation:
    """A verified delegation token for one Brand, with its store check made once per token."""

    brand_id: str
    claims: DelegationClaims
    grant: GrantCheck
    """What the turn's begin step checks: the grant is live and this (PA, ``sub``)'s, and the
    context's Brand user is this token's (§5.5)."""


class DelegationVerifier:
    """Verifies ``X-A2A-User-Delegation`` for the delegating Brands of one configuration."""

    def __init__(self, server: AuthorizationServer, *, cache_size: int = 10000) -> None:
        self._server = server
        self._urls: dict[str, OAuthUrls] = {
            brand.id: server.urls(brand)
            for brand in server.config.brands.values()
            if brand.delegation is not None
        }
        self._tokens: TokenCache[Delegation] = TokenCache(cache_size)

    def verify(self, header: str, brand: BrandConfig, pa_issuer: str) -> Delegation:
        """The delegation ``header`` carries for ``brand``, sent by the personal agent ``pa_issuer``.

        Raises :class:`InvalidToken` (``401``, ``error="invalid_token"``) for a header that is
        not ``Bearer <token>``, a Brand that does not delegate, any §5.4 failure, or a token
        issued to another personal agent.
        """
        urls = self._urls.get(brand.id)
        if urls is None:
            raise InvalidToken("not_delegating")
        try:
            token = bearer_token(header)
        except AuthFailure:
            raise InvalidToken("malformed") from None
        now = self._server.clock()
        delegation = self._tokens.get(token, now)
        if delegation is None:
            claims = verify_access_token(
                self._server.keys, token, issuer=urls.issuer, audience=urls.interface, now=now
            )
            grant = GrantCheck(
                keys.grant_key(brand.id, claims.grant_id), keys.user_digest(brand.id, claims.user)
            )
            delegation = Delegation(brand.id, claims, grant)
            self._tokens.put(token, delegation, issuer=brand.id, expires_at=claims.expires_at)
        elif delegation.brand_id != brand.id:
            # Verified for another Brand: its ``aud`` is that Brand's interface URL, not this one's.
            raise InvalidToken("bad_audience")
        if delegation.claims.client_id != pa_issuer:
            # §5.4: ``client_id`` MUST equal the ``iss`` of the personal-agent JWT sent with it.
            raise InvalidToken("client_mismatch")
        return delegation
