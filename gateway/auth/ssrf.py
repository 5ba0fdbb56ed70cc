"""The address guard for key and discovery fetches (conformance notes, "Authentication").

Under the ``open`` policy any caller chooses the URL the gateway fetches (its ``iss``), so
every fetch target must be HTTPS on a public address unless ``development`` is on. The guard
has two layers: :func:`check_fetch_url` refuses bad schemes and literal private addresses
before any I/O, and :class:`PublicAddressResolver` refuses host names that resolve to a
private address at connect time, so the address that was checked is the one connected to
and a DNS rebind between check and connect gets nowhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

__all__ = [
    "BlockedTarget",
    "PublicAddressResolver",
    "check_fetch_url",
    "is_forbidden_address",
    "resolve_public",
]

_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class BlockedTarget(OSError):
    """A fetch target the guard refuses. An ``OSError`` so aiohttp reports it as a connection error."""


def is_forbidden_address(address: str | _IPAddress) -> bool:
    """True for any address a key fetch must not reach outside development.

    Private, loopback, link-local, unspecified, multicast and reserved ranges, anything else
    IANA marks as not globally reachable, and IPv4-mapped IPv6 forms of all of those.
    """
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_unspecified
        or ip.is_multicast
        or ip.is_reserved
        or not ip.is_global
    )


def check_fetch_url(url: str, *, development: bool) -> URL:
    """The parsed URL if the guard allows fetching it; :class:`BlockedTarget` otherwise.

    §3.1 ``jwksUri`` is HTTPS. Plain HTTP and private targets are allowed only under
    ``development``. A host name is not resolved here; that is :func:`resolve_public`'s job.
    """
    try:
        target = URL(url)
    except (TypeError, ValueError):
        raise BlockedTarget("not a URL") from None
    if not target.absolute or not target.host:
        raise BlockedTarget("not an absolute URL")
    if target.scheme not in {"https", "http"}:
        raise BlockedTarget(f"scheme {target.scheme!r} is not allowed")
    if development:
        return target
    if target.scheme != "https":
        raise BlockedTarget("only https is allowed outside development")
    if target.user is not None or target.password is not None:
        raise BlockedTarget("credentials in the URL are not allowed")
    try:
        literal: _IPAddress | None = ipaddress.ip_address(target.host)
    except ValueError:
        literal = None
    if literal is not None and is_forbidden_address(literal):
        raise BlockedTarget("private or reserved address")
    return target


async def resolve_public(
    host: str, port: int, family: socket.AddressFamily = socket.AF_UNSPEC
) -> list[ResolveResult]:
    """Resolve ``host`` with the loop's getaddrinfo; refuse it if ANY address is forbidden.

    Refusing the whole name (rather than dropping the bad addresses) keeps a name that mixes
    public and private answers from being used to reach the private one later.
    """
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, family=family)
    except socket.gaierror as exc:
        raise BlockedTarget(f"cannot resolve host: {exc.strerror}") from None
    results: list[ResolveResult] = []
    for info_family, _, proto, _, sockaddr in infos:
        address = str(sockaddr[0])
        if is_forbidden_address(address.split("%", 1)[0]):
            raise BlockedTarget("host resolves to a private or reserved address")
        results.append(
            ResolveResult(
                hostname=host,
                host=address,
                port=int(sockaddr[1]),
                family=info_family,
                proto=proto,
                flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
            )
        )
    if not results:
        raise BlockedTarget("host has no addresses")
    return results


class PublicAddressResolver(AbstractResolver):
    """An aiohttp resolver that only ever hands the connector public addresses.

    Installed by ``make_fetch_session`` outside development: aiohttp connects to exactly the
    addresses returned here, so the check and the connection use the same answer.
    """

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return await resolve_public(host, port, family)

    async def close(self) -> None:
        """Nothing to release: lookups go through the event loop's executor."""
