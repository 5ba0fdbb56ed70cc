"""The §5 authorization server of one configuration: what every delegation handler and turn needs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gateway.auth.jwks import JwksCache
from gateway.auth.token_cache import TokenCache
from gateway.config import BrandConfig, DelegationConfig, GatewayConfig
from gateway.oauth.login import RefusedAssertion
from gateway.oauth.metadata import render_metadata
from gateway.protocol.urls import OAuthUrls
from gateway.provider_keys import ProviderKeys
from gateway.store.oauth import OAuthStore

__all__ = ["REFUSED_ASSERTIONS", "AuthorizationServer", "DelegatingBrand"]

REFUSED_ASSERTIONS = 10000
"""Refused login assertions remembered at once (least recently seen first out), as many as the
personal-agent verifier keeps refused tokens: about 150 bytes each."""


@dataclass(frozen=True, slots=True)
class DelegatingBrand:
    """One Brand's authorization server: its §5 settings, its URLs and its RFC 8414 metadata, serialized."""

    brand: BrandConfig
    delegation: DelegationConfig
    urls: OAuthUrls
    metadata: bytes


@dataclass(frozen=True, slots=True)
class AuthorizationServer:
    """Keys, state and clocks shared by every delegating Brand of one configuration.

    ``login_keys`` caches the Brands' login key sets under the fetch rules of the personal
    agents' (:mod:`gateway.auth.jwks`), keyed by Brand id; ``clock`` is wall-clock seconds,
    the same one the store decides with.
    """

    config: GatewayConfig
    keys: ProviderKeys
    store: OAuthStore
    login_keys: JwksCache
    clock: Callable[[], float]
    brands: Mapping[str, DelegatingBrand] = field(init=False, repr=False, compare=False)
    """The delegating Brands by id, built with the runtime (a reload builds a new server)."""
    refused_assertions: TokenCache[RefusedAssertion] = field(
        init=False, repr=False, compare=False, default_factory=lambda: TokenCache(REFUSED_ASSERTIONS)
    )
    """§5.3 login assertions refused lately; a reload starts afresh (the login settings may have changed)."""

    def __post_init__(self) -> None:
        brands: dict[str, DelegatingBrand] = {}
        for brand in self.config.brands.values():
            if brand.delegation is not None:
                urls = self.urls(brand)
                metadata = render_metadata(brand.delegation, urls)
                brands[brand.id] = DelegatingBrand(brand, brand.delegation, urls, metadata)
        object.__setattr__(self, "brands", brands)

    def urls(self, brand: BrandConfig) -> OAuthUrls:
        return OAuthUrls.of(self.config.public_url, brand.id)

    def brand(self, brand_id: str) -> DelegatingBrand | None:
        """The Brand ``brand_id`` if it delegates: every §5 endpoint of any other is a bare 404."""
        return self.brands.get(brand_id)
