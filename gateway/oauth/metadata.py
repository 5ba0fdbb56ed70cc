"""RFC 8414 authorization server metadata (§5.1 ``oauth2MetadataUrl``) and the ``jwks_uri`` key set.

Both are public like the card (§2.1: no authentication, the same cache headers peers send)
and exist only for a Brand that delegates; any other Brand gets a bare ``404``. Metadata is
served at ``{issuer}/.well-known/oauth-authorization-server`` (what the card links) and at
the RFC 8414 §3.1 location, the well-known suffix inserted before the issuer's path, by
:mod:`gateway.handlers.oauth.metadata`; this module builds the document.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from gateway.config import DelegationConfig
from gateway.protocol.urls import OAuthUrls

__all__ = [
    "DEVICE_CODE_GRANT",
    "PA_JWT_AUTH_METHOD",
    "REFRESH_TOKEN_GRANT",
    "build_metadata",
    "render_metadata",
]

DEVICE_CODE_GRANT: Final = "urn:ietf:params:oauth:grant-type:device_code"
"""RFC 8628 §3.4 ``grant_type`` of a token poll."""
REFRESH_TOKEN_GRANT: Final = "refresh_token"  # noqa: S105 - an RFC 6749 §6 grant type
PA_JWT_AUTH_METHOD: Final = "pact_pa_jwt"
"""How the personal agent authenticates at the token and revocation endpoints (§5 "Client
authentication"): its self-signed §3 JWT as ``Authorization: Bearer``. No registered method
says that: ``private_key_jwt`` (RFC 7523) is a ``client_assertion`` form parameter, which
these endpoints do not take, so advertising it would send a generic client down a path that
fails. RFC 8414 §2 takes these values from RFC 7591 §2, which admits unregistered ones; PACT
defines none, so this one names the profile's own method for a PACT-aware client."""


def build_metadata(delegation: DelegationConfig, urls: OAuthUrls) -> dict[str, Any]:
    """The RFC 8414 §2 document of one Brand's authorization server.

    No authorization endpoint (the device flow needs none), so ``response_types_supported``,
    required by §2, is empty; the introspection endpoint is named only when the Brand set a
    secret for it, since without one it does not exist. RFC 9396 §10: the detail types the Brand
    accepts, in configuration order, only when it accepts any.
    """
    document: dict[str, Any] = {
        "issuer": urls.issuer,
        "device_authorization_endpoint": urls.device_authorization,
        "token_endpoint": urls.token,
        "revocation_endpoint": urls.revocation,
    }
    if delegation.introspection_secret is not None:
        document["introspection_endpoint"] = urls.introspection
    document.update(
        {
            "jwks_uri": urls.jwks_uri,
            "scopes_supported": list(delegation.scopes),
            "response_types_supported": [],
            "grant_types_supported": [DEVICE_CODE_GRANT, REFRESH_TOKEN_GRANT],
            "token_endpoint_auth_methods_supported": [PA_JWT_AUTH_METHOD],
            "revocation_endpoint_auth_methods_supported": [PA_JWT_AUTH_METHOD],
        }
    )
    if delegation.authorization_details:
        document["authorization_details_types_supported"] = list(delegation.authorization_details)
    return document


def render_metadata(delegation: DelegationConfig, urls: OAuthUrls) -> bytes:
    """:func:`build_metadata` serialized: done once per runtime, when the Brand's server is built."""
    return orjson.dumps(build_metadata(delegation, urls))
