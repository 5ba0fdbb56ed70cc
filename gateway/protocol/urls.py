"""Where a Brand's operations live: its §2.1 interface URL, and under it its OAuth endpoints (§5.1).

The RFC 8414 ``issuer`` is ``{interface}/oauth``, and every delegation token's ``iss`` is that
same string (§5.4), so a token names the one Brand whose keys and grants it belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["OAuthUrls", "interface_url", "with_query"]


def interface_url(public_url: str, brand_id: str) -> str:
    """The §2.1 interface URL: every A2A operation of a Brand is relative to it."""
    return f"{public_url}/a2a/{brand_id}"


@dataclass(frozen=True, slots=True)
class OAuthUrls:
    interface: str

    @classmethod
    def of(cls, public_url: str, brand_id: str) -> OAuthUrls:
        return cls(interface_url(public_url, brand_id))

    @property
    def issuer(self) -> str:
        return f"{self.interface}/oauth"

    @property
    def metadata(self) -> str:
        return f"{self.issuer}/.well-known/oauth-authorization-server"

    @property
    def jwks_uri(self) -> str:
        return f"{self.issuer}/jwks.json"

    @property
    def device_authorization(self) -> str:
        return f"{self.issuer}/device_authorization"

    @property
    def token(self) -> str:
        return f"{self.issuer}/token"

    @property
    def revocation(self) -> str:
        return f"{self.issuer}/revoke"

    @property
    def introspection(self) -> str:
        return f"{self.issuer}/introspect"

    @property
    def consent(self) -> str:
        """Where the Brand's login posts its ``assertion`` (the assertion's ``aud``)."""
        return f"{self.issuer}/consent"

    @property
    def consent_decision(self) -> str:
        """Where the consent page's form posts ``session``, ``scope`` and ``decision``."""
        return f"{self.issuer}/consent/decision"

    @property
    def landing(self) -> str:
        """The built-in "you can close this page" page, used when the Brand sets no ``landing_url``."""
        return f"{self.issuer}/done"


def with_query(url: str, **params: str) -> str:
    """``url`` with ``params`` added to its query (existing parameters kept, in order)."""
    parts = urlsplit(url)
    query = [*parse_qsl(parts.query, keep_blank_values=True), *params.items()]
    return urlunsplit(parts._replace(query=urlencode(query)))
