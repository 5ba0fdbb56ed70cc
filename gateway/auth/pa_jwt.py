"""The §3 personal-agent JWT verifier: the one call the HTTP layer makes to authenticate.

Order of work for an uncached token: parse the header and claims unverified (only to pick
the issuer and key), apply the §3.2 header rules, resolve the issuer against the registry
(§3.1, or OIDC discovery under the ``open`` policy), get the key from the JWKS cache, verify
the signature with PyJWT restricted to the header's one allowed ``alg``, then apply the §3.2
claim rules to the verified payload. Every failure is an :class:`AuthFailure`; the token is
never logged, in whole or in part.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import jwt

from gateway.auth.discovery import OidcDiscovery
from gateway.auth.jwks import JwksCache, PublicKey, log_safe
from gateway.auth.signature import SIGNATURE_ONLY
from gateway.auth.token_cache import TokenCache
from gateway.config import PersonalAgentConfig, PersonalAgentsConfig
from gateway.protocol.claims import (
    AuthFailure,
    AuthReason,
    check_claims,
    check_header,
    split_unverified,
    unverified_issuer,
)

__all__ = ["AuthFailure", "AuthReason", "PAIdentity", "PAVerifier", "bearer_token"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PAIdentity:
    """§3.2: the User is the pair (personal agent, ``sub``); ``expires_at`` is the token's ``exp``."""

    issuer: str
    sub: str
    expires_at: float


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <pa-jwt>`` header (§3.2); scheme case-insensitive."""
    parts = (authorization or "").split(None, 1)
    if not parts or parts[0].lower() != "bearer":
        raise AuthFailure("missing_token")
    if len(parts) != 2 or len(parts[1].split()) != 1:
        raise AuthFailure("malformed")
    return parts[1].strip()


@dataclass(frozen=True, slots=True)
class _Registry:
    """One configuration's view of §3.1 registration; replaced whole on reload."""

    agents: PersonalAgentsConfig
    audience: str
    by_issuer: Mapping[str, PersonalAgentConfig]

    @classmethod
    def build(cls, agents: PersonalAgentsConfig, audience: str) -> _Registry:
        by_issuer = MappingProxyType({agent.issuer: agent for agent in agents.registered})
        return cls(agents=agents, audience=audience, by_issuer=by_issuer)

    def lookup(self, issuer: str) -> PersonalAgentConfig | None:
        """The registration of ``issuer``; ``None`` for an unregistered issuer the open policy admits."""
        agent = self.by_issuer.get(issuer)  # §3.1: exact string match
        if agent is None:
            if self.agents.policy == "open":
                return None
            raise AuthFailure("unknown_issuer")
        if not agent.enabled:  # §3.1: a disabled personal agent gets 401
            raise AuthFailure("disabled_issuer")
        return agent

    def accepts(self, issuer: str) -> bool:
        try:
            self.lookup(issuer)
        except AuthFailure:
            return False
        return True


@dataclass(frozen=True, slots=True)
class _Verdict:
    identity: PAIdentity
    key_version: int


class PAVerifier:
    """Verifies §3.2 personal-agent JWTs against the registered (or discovered) issuers' JWKS.

    ``on_discovery_fetch`` hears whether each OIDC discovery fetch (``open`` policy) succeeded.
    """

    def __init__(
        self,
        agents: PersonalAgentsConfig,
        audience: str,
        jwks: JwksCache,
        *,
        clock: Callable[[], float] = time.time,
        token_cache_size: int = 10000,
        on_discovery_fetch: Callable[[bool], None] | None = None,
    ) -> None:
        self._jwks = jwks
        self._clock = clock
        self._discovery = OidcDiscovery(jwks.fetcher, clock=jwks.clock, on_fetch=on_discovery_fetch)
        self._tokens: TokenCache[_Verdict] = TokenCache(token_cache_size)
        self._registry = _Registry.build(agents, audience)
        self._preload(agents)

    async def verify(self, token: str) -> PAIdentity:
        """The caller's identity, or AuthFailure (§3.4: the HTTP layer answers a bare 401)."""
        cached = self._tokens.get(token, self._clock())
        if cached is not None and self._jwks.version(cached.identity.issuer) == cached.key_version:
            return cached.identity
        registry = self._registry
        issuer: str | None = None
        try:
            header_fields, unverified_claims = split_unverified(token)
            header = check_header(header_fields)
            issuer = unverified_issuer(unverified_claims)
            source = await self._key_source(registry, issuer)
            key = await self._jwks.key_for(issuer, source, header.kid, header.alg)
            key_version = self._jwks.version(issuer)
            payload = self._verify_signature(token, key, header.alg)
            # A reload may have disabled the issuer or changed the audience while keys were fetched.
            registry = self._registry
            registry.lookup(issuer)
            claims = check_claims(payload, issuer=issuer, audience=registry.audience, now=self._clock())
        except AuthFailure as failure:
            self._log_rejection(failure.reason, issuer, registry)
            raise
        identity = PAIdentity(issuer=claims.issuer, sub=claims.sub, expires_at=claims.expires_at)
        if key_version is not None:
            self._tokens.put(
                token, _Verdict(identity, key_version), issuer=issuer, expires_at=claims.expires_at
            )
        return identity

    def update(self, agents: PersonalAgentsConfig, audience: str) -> None:
        """Swap in a reloaded registry atomically; forget verdicts the new one would not give."""
        previous = self._registry
        self._registry = _Registry.build(agents, audience)
        for agent in previous.agents.registered:
            now_registered = self._registry.by_issuer.get(agent.issuer)
            if agent.jwks is not None and (now_registered is None or now_registered.jwks is None):
                self._jwks.discard(agent.issuer)
        self._preload(agents)
        if audience != previous.audience:
            self._tokens.clear()
        else:
            self._tokens.retain_issuers(self._registry.accepts)

    def _preload(self, agents: PersonalAgentsConfig) -> None:
        for agent in agents.registered:
            if agent.jwks is not None:
                self._jwks.preload(agent.issuer, agent.jwks)

    async def _key_source(self, registry: _Registry, issuer: str) -> str | None:
        """Where the issuer's keys come from: ``None`` for inline keys, else a ``jwksUri``."""
        agent = registry.lookup(issuer)
        if agent is None:
            return await self._discovery.jwks_uri(issuer)
        return None if agent.jwks is not None else agent.jwks_uri

    def _verify_signature(self, token: str, key: PublicKey, alg: str) -> dict[str, Any]:
        try:
            # One algorithm, chosen by the allow-list and matched to the key's type (§3.2).
            payload: dict[str, Any] = SIGNATURE_ONLY.decode(token, key, algorithms=[alg])
        except jwt.InvalidSignatureError:
            raise AuthFailure("bad_signature") from None
        except jwt.InvalidAlgorithmError:
            raise AuthFailure("bad_alg") from None
        except jwt.InvalidKeyError:
            raise AuthFailure("weak_key") from None
        except jwt.PyJWTError:
            raise AuthFailure("malformed") from None
        return payload

    @staticmethod
    def _log_rejection(reason: AuthReason, issuer: str | None, registry: _Registry) -> None:
        # Registered issuers' failures are integration problems worth seeing; the rest is noise.
        level = logging.INFO if issuer is not None and issuer in registry.by_issuer else logging.DEBUG
        _log.log(level, "personal-agent token rejected: reason=%s issuer=%s", reason, log_safe(issuer or "-"))
