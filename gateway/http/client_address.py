"""The client's address: the peer's, or what a trusted proxy in front of the gateway says it was.

Behind an Ingress every request comes from the proxy, so per-address limits (the consent URL's,
the wrong-``user_code`` lockout) and the access line need the address the proxy received the
request from. A proxy appends it to ``X-Forwarded-For`` (or RFC 7239 ``Forwarded``); a client
can write anything there, so the header is read only when the peer is in
``listen.trusted_proxies``, and then from the right: each hop appended by a trusted proxy is
skipped, and the first address not in those networks is the client. Everything to its left was
written by the client (or by proxies it chose) and is never believed. With no trusted proxies
(the default) the header is not read at all.

:func:`client_address` is the one place this is decided: every per-address limit and log field
uses it. A per-address limit counts it as :func:`limit_address` says: an IPv6 client by its
``listen.ipv6_prefix`` network (a /64 by default), without a zone id, since one host is usually
given a whole /64 and would otherwise have 2⁶⁴ budgets (issue 28 L2).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address

from aiohttp import web

from gateway.config import ListenConfig

__all__ = ["UntrustedForwarding", "address_subject", "client_address", "limit_address", "parse_address"]

_log = logging.getLogger("pact_gateway.client_address")

_Address = IPv4Address | IPv6Address
_Network = IPv4Network | IPv6Network

UNKNOWN = "-"
"""A peer with no IP address (a Unix socket): every such client shares one budget."""


def parse_address(text: str) -> _Address | None:
    """An address as a proxy writes one: ``192.0.2.1``, ``192.0.2.1:4711``, ``2001:db8::1`` or
    ``[2001:db8::1]:4711``, optionally quoted (RFC 7239 quotes IPv6); ``None`` for anything else
    (``unknown``, an obfuscated RFC 7239 §6.3 identifier, garbage). An IPv4-mapped IPv6 address is
    its IPv4 address, so a dual-stack socket and a proxy name one client alike. Only read with
    trusted proxies configured: without, the peer's address is taken as the socket gives it."""
    text = text.strip().strip('"')
    if text.startswith("["):
        host, bracket, _ = text[1:].partition("]")
        if not bracket:
            return None
        text = host
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        address = ip_address(text)
    except ValueError:
        return None
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _trusted(address: _Address, networks: Sequence[_Network]) -> bool:
    return any(address in network for network in networks)


def _hops(request: web.Request, listen: ListenConfig) -> Iterable[str]:
    """The addresses the chosen header lists, left (the client's claim) to right (the last proxy's)."""
    if listen.forwarded_header == "Forwarded":
        # aiohttp parses RFC 7239 (quoting, several headers, several elements each).
        return [element.get("for", "") for element in request.forwarded]
    return [hop for value in request.headers.getall("X-Forwarded-For", ()) for hop in value.split(",")]


def client_address(request: web.Request, listen: ListenConfig) -> str:
    """The address the request came from, as text: the peer's, unless the peer is a trusted proxy.

    From a trusted peer, the header's hops are read right to left: trusted proxies are skipped
    and the first other address is the client. A hop that is not an address stops the walk at
    the proxy that passed it on (it cannot be told apart from a client's forgery); a chain of
    trusted proxies only gives the leftmost of them.
    """
    peer = request.remote
    networks = listen.trusted_proxies
    if not networks:  # the default, on every request's access line: nothing to parse
        return peer or UNKNOWN
    address = parse_address(peer) if peer else None
    if address is None:
        return peer or UNKNOWN
    if not _trusted(address, networks):
        return str(address)
    for hop in reversed(list(_hops(request, listen))):
        claimed = parse_address(hop)
        if claimed is None:
            break
        address = claimed
        if not _trusted(address, networks):
            break
    return str(address)


def address_subject(address: str, ipv6_prefix: int) -> str:
    """What a per-address limit counts ``address`` (as :func:`client_address` gives it) under: an
    IPv4 address itself (an IPv4-mapped IPv6 one too); an IPv6 address's ``/ipv6_prefix`` network,
    its zone id dropped (a zone names the gateway's own interface, and a link-local peer could
    vary it); anything else (a Unix socket's ``-``) as it is."""
    parsed = parse_address(address.partition("%")[0])
    if parsed is None:
        return address
    if isinstance(parsed, IPv4Address):
        return str(parsed)
    return str(IPv6Network((int(parsed), ipv6_prefix), strict=False))


def limit_address(request: web.Request, listen: ListenConfig) -> str:
    """The client's address as every per-address limit counts it (:func:`address_subject`)."""
    return address_subject(client_address(request, listen), listen.ipv6_prefix)


class UntrustedForwarding:
    """Says once, per app, that a private peer sends a forwarded header nobody trusts (issue 28 L3).

    With ``listen.trusted_proxies`` empty (the default) the header is never read, which is right
    for a gateway facing the Internet; but a private peer (an Ingress controller, a proxy on the
    host) that sends one is almost surely a proxy the operator forgot to name, and then every
    User behind it shares its address's per-address limits: one client can keep a Brand's
    sign-in paused. Until it has warned, each request costs a header lookup; after, one test.
    """

    __slots__ = ("warned",)

    def __init__(self) -> None:
        self.warned = False

    def check(self, request: web.Request, listen: ListenConfig) -> None:
        """Warn, the first time only, when ``request`` is such a case."""
        if self.warned or listen.trusted_proxies or listen.forwarded_header not in request.headers:
            return
        peer = parse_address(request.remote or "")
        if peer is None or not peer.is_private:
            return
        self.warned = True
        _log.warning(
            "%s sent by the private peer %s is ignored: listen.trusted_proxies is empty, so every "
            "client behind that proxy shares its address and its per-address limits (one can keep "
            "a Brand's sign-in paused); name the proxy's network in listen.trusted_proxies",
            listen.forwarded_header,
            peer,
        )
