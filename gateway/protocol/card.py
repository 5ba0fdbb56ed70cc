"""§2.1 Agent Cards: one per Brand, built once from configuration and served as fixed bytes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.config import BrandConfig, GatewayConfig
from gateway.protocol.urls import OAuthUrls, interface_url

__all__ = ["RenderedCard", "build_card", "etag_matches", "interface_url", "render_card"]

DELEGATION_SCHEME = "userDelegation"
"""§5.1: the name of the ``oauth2SecurityScheme`` a delegating Brand's card adds."""


def build_card(config: GatewayConfig, brand: BrandConfig) -> dict[str, Any]:
    """The card exactly in the §2.1 shape, with §5.1 delegation when the Brand offers it.

    The PA scheme is listed alone in one ``securityRequirements`` entry (§2.1); all three
    capability flags are ``false`` because the gateway answers synchronously only. A Brand
    without ``delegation`` gets exactly the Identity card.
    """
    scheme = config.security_scheme_name
    card: dict[str, Any] = {
        "name": brand.name,
        "description": brand.description,
        "supportedInterfaces": [
            {
                "url": interface_url(config.public_url, brand.id),
                "protocolBinding": "HTTP+JSON",
                "protocolVersion": "1.0",
            }
        ],
        "provider": {"organization": config.provider.organization, "url": config.provider.url},
        "version": brand.version,
        "capabilities": {"streaming": False, "pushNotifications": False, "extendedAgentCard": False},
        "securitySchemes": {scheme: {"httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT"}}},
        "securityRequirements": [{"schemes": {scheme: {"list": []}}}],
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [
            {"id": s.id, "name": s.name, "description": s.description, "tags": list(s.tags)}
            for s in brand.skills
        ],
    }
    if brand.delegation is not None:
        # §5.1: the device-code flow beside the PA scheme; the PA-only entry stays first.
        urls = OAuthUrls.of(config.public_url, brand.id)
        card["securitySchemes"][DELEGATION_SCHEME] = {
            "oauth2SecurityScheme": {
                "flows": {
                    "deviceCode": {
                        "deviceAuthorizationUrl": urls.device_authorization,
                        "tokenUrl": urls.token,
                        "scopes": dict(brand.delegation.scopes),
                    }
                },
                "oauth2MetadataUrl": urls.metadata,
            }
        }
        card["securityRequirements"].append(
            {"schemes": {scheme: {"list": []}, DELEGATION_SCHEME: {"list": []}}}
        )
    return card


@dataclass(frozen=True, slots=True)
class RenderedCard:
    """A card serialized once, with the strong ETag that ``If-None-Match`` is compared against."""

    body: bytes
    etag: str


def render_card(config: GatewayConfig, brand: BrandConfig) -> RenderedCard:
    body = orjson.dumps(build_card(config, brand))
    return RenderedCard(body=body, etag='"' + hashlib.sha256(body).hexdigest()[:32] + '"')


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 §13.1.2 weak comparison: ``*`` or any listed tag, ``W/`` prefixes ignored."""
    if not if_none_match:
        return False
    if if_none_match.strip() == "*":
        return True
    bare = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == bare for tag in if_none_match.split(","))
