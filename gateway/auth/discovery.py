"""OIDC discovery of ``jwksUri`` for the ``open`` personal-agent policy (§3.1).

Under ``open`` any issuer whose ``{iss}/.well-known/openid-configuration`` names a
``jwks_uri`` may call; §3.2 is still verified in full. The discovery document is fetched
with the same guarded fetcher as key sets and cached under the same rules (TTL from
``Cache-Control``, one fetch in flight, cool-down, last good value kept), and its fetches draw
on the same :class:`~gateway.auth.jwks.FetchBudget` as those issuers' key sets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from yarl import URL

from gateway.auth.jwks import FetchBudget, FetchError, JsonFetcher, RefreshingStore
from gateway.auth.ssrf import BlockedTarget, check_fetch_url
from gateway.protocol.claims import AuthFailure

__all__ = ["MAX_ISSUER_LENGTH", "OidcDiscovery", "acceptable_open_issuer", "discovery_url"]

MAX_ISSUER_LENGTH = 512
_WELL_KNOWN = "/.well-known/openid-configuration"


def acceptable_open_issuer(issuer: str, *, development: bool) -> bool:
    """Whether an unregistered ``iss`` may be looked up at all: an https URL with no query,
    fragment or credentials (OIDC Discovery §2); plain http only under ``development``.

    No white space or control character either: RFC 3986 has none, and yarl would quietly drop
    a newline or a tab, so ``iss`` would be one string and the URL fetched another.
    """
    if len(issuer) > MAX_ISSUER_LENGTH or not issuer.isprintable() or " " in issuer:
        return False
    try:
        url = URL(issuer)
    except (TypeError, ValueError):
        return False
    allowed = {"https", "http"} if development else {"https"}
    return (
        url.absolute
        and bool(url.host)
        and url.scheme in allowed
        and not url.query_string
        and not url.fragment
        and url.user is None
        and url.password is None
    )


def discovery_url(issuer: str) -> str:
    """``{iss}/.well-known/openid-configuration``, without doubling a trailing slash."""
    return issuer.rstrip("/") + _WELL_KNOWN


class OidcDiscovery:
    """Issuer → ``jwks_uri`` from each issuer's OIDC discovery document.

    ``on_fetch`` hears whether each discovery fetch produced a usable ``jwks_uri``; it is told
    no issuer, since anyone can name one under the ``open`` policy. ``budget`` is the one those
    issuers' key-set fetches draw on too (:attr:`gateway.auth.jwks.JwksCache.open_budget`).
    """

    def __init__(
        self,
        fetcher: JsonFetcher,
        *,
        clock: Callable[[], float],
        budget: FetchBudget,
        on_fetch: Callable[[bool], None] | None = None,
    ) -> None:
        self._fetcher = fetcher
        self._on_fetch = on_fetch
        self._store: RefreshingStore[str] = RefreshingStore(
            self._load,
            clock=clock,
            cooldown=fetcher.policy.refetch_cooldown,
            max_entries=fetcher.policy.max_cached_issuers,
            label="OIDC discovery",
            # Anyone can name an issuer under the open policy: its failures are not the operator's.
            failure_log_level=logging.INFO,
            may_fetch=lambda: budget.take("discovery"),
        )

    async def jwks_uri(self, issuer: str) -> str:
        """The issuer's ``jwks_uri``. AuthFailure ``unknown_issuer`` for an issuer that cannot be
        an open-policy issuer, ``jwks_unavailable`` when discovery has never succeeded."""
        if not acceptable_open_issuer(issuer, development=self._fetcher.development):
            raise AuthFailure("unknown_issuer")
        jwks_uri = await self._store.get(issuer, discovery_url(issuer))
        if jwks_uri is None:
            raise AuthFailure("jwks_unavailable")
        return jwks_uri

    async def _load(self, issuer: str, url: str) -> tuple[str, float]:
        try:
            jwks_uri, ttl = await self._discover(issuer, url)
        except FetchError:
            self._notify(ok=False)
            raise
        self._notify(ok=True)
        return jwks_uri, ttl

    def _notify(self, *, ok: bool) -> None:
        if self._on_fetch is not None:
            self._on_fetch(ok)

    async def _discover(self, issuer: str, url: str) -> tuple[str, float]:
        document, ttl = await self._fetcher.get(url)
        # OIDC Discovery §4.3: the document must be about the issuer that was asked for.
        if document.get("issuer", issuer) != issuer:
            raise FetchError("discovery document names another issuer")
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise FetchError("discovery document has no jwks_uri")
        try:
            check_fetch_url(jwks_uri, development=self._fetcher.development)
        except BlockedTarget as exc:
            raise FetchError(f"jwks_uri refused by the address guard: {exc}") from None
        return jwks_uri, ttl
