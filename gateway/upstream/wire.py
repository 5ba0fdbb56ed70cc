"""What the HTTP adapters share: one bounded exchange with a bot, its failures as bounded labels,
the pseudonymous user id a bot sees, and the probe's verdict on a status.

The ``pact`` adapter keeps its own tuned copy of the exchange (gateway/upstream/http_json.py,
measured by the bench per turn); the others use :func:`exchange`.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

import aiohttp
import orjson
from multidict import CIMultiDictProxy
from yarl import URL

from gateway.upstream.base import Turn, UpstreamError

__all__ = [
    "MAX_REPLY_BYTES",
    "MAX_REPLY_DEPTH",
    "WireReply",
    "connection_failure",
    "exchange",
    "loads_reply",
    "nested_deeper_than",
    "probe_endpoint",
    "probe_verdict",
    "read_capped",
    "user_handle",
]

MAX_REPLY_BYTES: Final = 1024 * 1024
"""A bot's answer is read whole up to this many bytes; a longer one is a bad body, not a partial reply."""
MAX_REPLY_DEPTH: Final = 64
"""A bot's JSON answer nests objects and arrays at most this deep; a deeper one is a bad body.

Parsing alone is bounded (orjson stops at 1,024 levels), but what the gateway then does with a
reply may recurse over it, as the §5.6 canonical form of an action's ``args`` does, and 1,000
levels there ran out of Python's stack (issue 18 F6). Real answers nest a handful of levels (a
Bot Framework card a dozen or so); this is not a setting because no bot needs more, and Python's
recursion limit is what it would have to stay well under."""
_PROBE_REFUSALS: Final = frozenset((401, 403, 404, 407))


class WireReply(NamedTuple):
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes


async def exchange(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    within: aiohttp.ClientTimeout,
    body: bytes | None = None,
    limit: int = MAX_REPLY_BYTES,
) -> WireReply:
    """One request, its answer read whole (at most ``limit`` bytes) ``within`` the client timeout.

    Redirects are not followed: a bot endpoint that moved is a misconfiguration to report, and
    following one would replay the User's text (and the Brand's headers) to wherever it points.
    Any status comes back; the caller decides what it means for its bot's API.
    """
    try:
        async with session.request(
            method, url, data=body, headers=headers, timeout=within, allow_redirects=False
        ) as response:
            return WireReply(response.status, response.headers, await read_capped(response, limit))
    except TimeoutError:
        raise UpstreamError("timeout", f"no answer within {within.total} s") from None
    except aiohttp.ClientConnectionError as exc:
        raise UpstreamError("connect", connection_failure(url, exc)) from None
    except aiohttp.ClientError as exc:
        raise UpstreamError("protocol", connection_failure(url, exc)) from None


def connection_failure(url: str | URL, exc: aiohttp.ClientError) -> str:
    """A call that got no usable answer, as the log and the probe say it: the target as ``host:port``
    (never the URL's credentials, path or query) and the cause in words, e.g.
    ``127.0.0.1:9100: connection refused``, instead of an exception's class name."""
    target = URL(url)
    host = f"[{target.host}]" if target.host and ":" in target.host else target.host
    if isinstance(exc, aiohttp.ClientConnectorError):
        cause = _os_cause(exc.os_error)
    elif isinstance(exc, aiohttp.ServerDisconnectedError):
        cause = "the server closed the connection without answering"
    elif isinstance(exc, aiohttp.ClientOSError):
        cause = _os_cause(exc)
    elif isinstance(exc, aiohttp.ClientPayloadError):
        cause = "the answer's body broke off"
    elif isinstance(exc, aiohttp.ClientResponseError):
        cause = f"not a valid HTTP answer ({type(exc).__name__})"
    else:
        cause = type(exc).__name__
    return f"{host}:{target.port}: {cause[:1].lower()}{cause[1:]}"


def _os_cause(error: OSError) -> str:
    """The operating system's words for ``error``: asyncio words a refused connect as "Connect call failed
    (address)", so the errno's own text ("Connection refused") is preferred; a name-resolution failure
    keeps its resolver's text ("Name or service not known"), whose code is no errno."""
    if error.errno and error.errno > 0 and not isinstance(error, socket.gaierror):
        return os.strerror(error.errno)
    return error.strerror or type(error).__name__


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` (parsed JSON) nests objects and arrays more than ``limit`` deep (a scalar
    is depth 0, ``[]`` depth 1), found without recursion: it is what recursion must be kept from."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth == limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def loads_reply(raw: bytes) -> Any:
    """A bot's JSON answer, parsed: :class:`orjson.JSONDecodeError` when it is not JSON (each adapter
    says what that means for its API), :class:`UpstreamError` ``bad_body`` when it nests deeper
    than :data:`MAX_REPLY_DEPTH`."""
    doc = orjson.loads(raw)
    # Nesting deeper than the limit needs more opening brackets than the limit; counting them runs in C,
    # so the walk is left for the rare reply with that many (brackets inside strings count too: a
    # reply can be walked needlessly, never let through unwalked).
    if raw.count(b"[") + raw.count(b"{") > MAX_REPLY_DEPTH and nested_deeper_than(doc, MAX_REPLY_DEPTH):
        raise UpstreamError("bad_body", f"reply nested deeper than {MAX_REPLY_DEPTH} levels")
    return doc


async def read_capped(response: aiohttp.ClientResponse, limit: int = MAX_REPLY_BYTES) -> bytes:
    """The whole body, or :class:`UpstreamError` ``bad_body`` past ``limit`` bytes.

    ``StreamReader.read(n)`` returns what has arrived so far, up to ``n``: one call returns only
    the first piece of a body the bot wrote in several, so read until the end or the limit.
    """
    if response.content_length is not None and response.content_length > limit:
        raise UpstreamError("bad_body", f"reply larger than {limit} bytes")
    content = response.content
    chunks: list[bytes] = []
    size = 0
    # at_eof() ends the loop once the body is in: the usual one-piece reply takes one read, not a
    # second that returns b"" (a call through aiohttp's timeout machinery on every turn).
    while size <= limit and not content.at_eof():
        chunk = await content.read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise UpstreamError("bad_body", f"reply larger than {limit} bytes")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def user_handle(turn: Turn) -> str:
    """A stable pseudonym for the turn's User at this Brand: what a bot sees instead of ``sub`` where its API
    names a user (Rasa's metadata, Direct Line's ``from.id``).

    128 bits of SHA-256 over (Brand, personal agent, ``sub``), hex, with a label of its own so it
    matches no key the store builds from the same triple. Stable, so the bot can tell a returning
    User; one-way, so the bot's logs hold no ``sub``.
    """
    material = "\x00".join(("pact-user-handle", turn.brand_id, turn.pa_issuer, turn.sub)).encode()
    return hashlib.sha256(material).hexdigest()[:32]


def probe_verdict(method: str, status: int) -> str:
    """What a probe's status says: the line to report, or :class:`UpstreamError` when it shows a fault.

    The probe sends no turn, so a bot's server refusing the method (405), not implementing it (501,
    what Python's ``http.server`` answers to an ``OPTIONS`` it has no handler for) or refusing the
    request (400) still proves it is there and speaking HTTP: the bot contract promises ``POST`` only.
    Any other 5xx, a refusal of the configured credentials (401, 403, 407), no such endpoint (404) or
    a redirect (not followed on turns either) is a fault.
    """
    line = f"{method} answered HTTP {status}"
    if status == 501:
        return f"{line} (not implemented: the server is there)"
    if status >= 500 or status in _PROBE_REFUSALS or 300 <= status < 400:
        raise UpstreamError("status", line)
    return line


async def probe_endpoint(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    within: aiohttp.ClientTimeout,
) -> str:
    """Send ``method`` to ``url`` with the Brand's headers, no body; :func:`probe_verdict` on the status."""
    reply = await exchange(session, method, url, headers=headers, within=within, limit=64 * 1024)
    return probe_verdict(method, reply.status)
