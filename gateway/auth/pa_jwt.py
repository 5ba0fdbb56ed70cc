"""The §3 personal-agent JWT verifier: the one call the HTTP layer makes to authenticate.

Order of work for an uncached token: parse the header and claims unverified (only to pick
the issuer and key), apply the §3.2 header rules, resolve the issuer against the registry
(§3.1, or OIDC discovery under the ``open`` policy), get the key from the JWKS cache, verify
the signature with PyJWT restricted to the header's one allowed ``alg``, then apply the §3.2
claim rules to the verified payload. Every failure is an :class:`AuthFailure`; the token is
never logged, in whole or in part.

Verdicts are cached by the token's digest both ways: an accepted token until its ``exp``
(:mod:`gateway.auth.token_cache`), a refused one for :data:`REJECTED_TTL` seconds, so a bad
token sent again costs a lookup, not another signature check. Either verdict is dropped when
the keys it was reached with change, and a reload drops what the new registry might judge
otherwise (an issuer disabled, removed, or moved to other keys).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NoReturn

import jwt

from gateway.auth.discovery import OidcDiscovery
from gateway.auth.jwks import JwksCache, PublicKey, log_safe
from gateway.auth.signature import SIGNATURE_ONLY
from gateway.auth.token_cache import TokenCache
from gateway.config import PersonalAgentConfig, PersonalAgentsConfig
from gateway.protocol.claims import (
    MAX_TOKEN_LENGTH,
    AuthFailure,
    AuthReason,
    ValidClaims,
    check_claims,
    check_header,
    split_unverified,
    unverified_issuer,
)

__all__ = ["REJECTED_TTL", "AuthFailure", "AuthReason", "PAIdentity", "PAVerifier", "bearer_token"]

_log = logging.getLogger(__name__)

REJECTED_TTL = 60.0
"""Seconds a refused token's verdict is kept: long enough that a replayed bad token costs a
lookup, short enough that nothing rests on it for long (a reload or new keys drop it at once)."""

_UNSETTLED: frozenset[AuthReason] = frozenset({"jwks_unavailable", "unknown_kid", "iat_future", "nbf_future"})
"""Refusals the same token may later pass without any key or registry change (keys fetched,
a rotation published, the clock catching up), so they are never cached. The first two cost no
signature check (and the fetches behind them have a cool-down); the last two carry a valid
signature, so only the token's own signer can send them."""


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

    def key_source(self, issuer: str) -> tuple[object, ...] | None:
        """Where ``issuer``'s keys come from under this registry, for comparing two registries:
        its inline keys, its ``jwks_uri``, OIDC discovery (``open``), or ``None`` (refused)."""
        agent = self.by_issuer.get(issuer)
        if agent is not None:
            return ("inline", agent.jwks) if agent.jwks is not None else ("jwks_uri", agent.jwks_uri)
        return ("discovery",) if self.agents.policy == "open" else None


@dataclass(frozen=True, slots=True)
class _Verdict:
    identity: PAIdentity
    key_version: int


@dataclass(frozen=True, slots=True)
class _Rejection:
    """A refused token: why, and (when keys were involved) which keys of which issuer refused it."""

    reason: AuthReason
    issuer: str | None
    key_version: int | None


@dataclass(slots=True)
class _Attempt:
    """How far one verification got, for caching its refusal: the claimed issuer, and whether
    its keys were consulted (the refusal then holds only while those keys do)."""

    issuer: str | None = None
    keyed: bool = False


class PAVerifier:
    """Verifies §3.2 personal-agent JWTs against the registered (or discovered) issuers' JWKS.

    ``on_discovery_fetch`` hears whether each OIDC discovery fetch (``open`` policy) succeeded.
    ``token_cache_size`` bounds the accepted and the refused verdicts, each.
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
        self._discovery = OidcDiscovery(
            jwks.fetcher, clock=jwks.clock, budget=jwks.open_budget, on_fetch=on_discovery_fetch
        )
        self._tokens: TokenCache[_Verdict] = TokenCache(token_cache_size)
        self._rejected: TokenCache[_Rejection] = TokenCache(token_cache_size)
        self._registry = _Registry.build(agents, audience)
        self._preload(agents)

    async def verify(self, token: str) -> PAIdentity:
        """The caller's identity, or AuthFailure (§3.4: the HTTP layer answers a bare 401)."""
        if len(token) > MAX_TOKEN_LENGTH:  # before digesting it for the caches
            self._refuse(token, "malformed", _Attempt(), self._registry, cache=False)
        now = self._clock()
        cached = self._tokens.get(token, now)
        if cached is not None and self._jwks.version(cached.identity.issuer) == cached.key_version:
            return cached.identity
        rejected = self._rejected.get(token, now)
        if rejected is not None and (
            rejected.key_version is None
            or (rejected.issuer is not None and self._jwks.version(rejected.issuer) == rejected.key_version)
        ):
            self._log_rejection(rejected.reason, rejected.issuer, self._registry)
            raise AuthFailure(rejected.reason)
        while True:
            registry = self._registry
            attempt = _Attempt()
            try:
                claims, key_version = await self._check(token, registry, attempt)
            except AuthFailure as failure:
                if self._registry is not registry:
                    continue  # a reload landed while keys were fetched: judge again under the new one
                self._refuse(token, failure.reason, attempt, registry, cache=True)
            if self._registry is registry:
                break
        identity = PAIdentity(issuer=claims.issuer, sub=claims.sub, expires_at=claims.expires_at)
        if key_version is not None:
            self._tokens.put(
                token, _Verdict(identity, key_version), issuer=claims.issuer, expires_at=claims.expires_at
            )
        return identity

    async def _check(
        self, token: str, registry: _Registry, attempt: _Attempt
    ) -> tuple[ValidClaims, int | None]:
        """The full §3.2 check under ``registry``; ``attempt`` records how far it got."""
        header_fields, unverified_claims = split_unverified(token)
        header = check_header(header_fields)
        issuer = attempt.issuer = unverified_issuer(unverified_claims)
        agent = registry.lookup(issuer)
        source: str | None
        if agent is None:
            source = await self._discovery.jwks_uri(issuer)
        else:  # None for inline keys
            source = None if agent.jwks is not None else agent.jwks_uri
        attempt.keyed = True
        key = await self._jwks.key_for(issuer, source, header.kid, header.alg, open_policy=agent is None)
        key_version = self._jwks.version(issuer)
        payload = self._verify_signature(token, key, header.alg)
        claims = check_claims(payload, issuer=issuer, audience=registry.audience, now=self._clock())
        return claims, key_version

    def _refuse(
        self, token: str, reason: AuthReason, attempt: _Attempt, registry: _Registry, *, cache: bool
    ) -> NoReturn:
        """Log and raise the refusal, remembering it for :data:`REJECTED_TTL` unless it may not last."""
        self._log_rejection(reason, attempt.issuer, registry)
        if cache and reason not in _UNSETTLED:
            key_version = None
            if attempt.keyed and attempt.issuer is not None:
                key_version = self._jwks.version(attempt.issuer)
            if key_version is not None or not attempt.keyed:
                rejection = _Rejection(reason, attempt.issuer, key_version)
                self._rejected.put(
                    token, rejection, issuer=attempt.issuer or "", expires_at=self._clock() + REJECTED_TTL
                )
        raise AuthFailure(reason)

    def update(self, agents: PersonalAgentsConfig, audience: str) -> None:
        """Swap in a reloaded registry atomically; forget verdicts the new one would not give.

        An issuer whose keys now come from elsewhere (another ``jwks_uri``, other inline keys,
        inline keys for a URL or back, registered after being discovered or the reverse) loses
        its keys and every verdict on its tokens: a token its old keys signed must be checked
        against the new ones. Refusals are all dropped (the registry they rest on changed).
        """
        previous = self._registry
        self._registry = _Registry.build(agents, audience)
        issuers = previous.by_issuer.keys() | self._registry.by_issuer.keys()
        moved = {
            issuer for issuer in issuers if previous.key_source(issuer) != self._registry.key_source(issuer)
        }
        for issuer in moved:
            self._jwks.discard(issuer)
        self._preload(agents)
        self._rejected.clear()
        if audience != previous.audience:
            self._tokens.clear()
        else:
            registry = self._registry
            self._tokens.retain_issuers(lambda issuer: issuer not in moved and registry.accepts(issuer))

    def _preload(self, agents: PersonalAgentsConfig) -> None:
        for agent in agents.registered:
            if agent.jwks is not None:
                self._jwks.preload(agent.issuer, agent.jwks)

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
