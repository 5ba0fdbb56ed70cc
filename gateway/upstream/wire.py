"""What the HTTP adapters share: one bounded exchange with a bot, its failures as bounded labels,
the pseudonymous user id a bot sees, and the probe's verdict on a status.

Every call goes through the process's :class:`~gateway.upstream.client.BotClient`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from gateway.upstream.base import Turn, UpstreamError
from gateway.upstream.client import BotClient, Target, WireReply

__all__ = [
    "MAX_REPLY_BYTES",
    "MAX_REPLY_DEPTH",
    "WRONG_MESSAGE",
    "WireReply",
    "exchange",
    "loads_reply",
    "nested_deeper_than",
    "probe_endpoint",
    "probe_verdict",
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
WRONG_MESSAGE: Final = "wrong_message"
"""The failure of an answer that names another call than its own (the pact contract's ``message_id``,
Rasa's ``recipient_id``): its bounded reason in logs and ``pact_bot_call_duration_seconds{outcome}``.
The adapter also has the client :meth:`~gateway.upstream.client.BotClient.forget` the bot's idle
connections, the one that carried the answer among them (issue 28 I1)."""
_PROBE_REFUSALS: Final = frozenset((401, 403, 404, 407))


async def exchange(
    client: BotClient,
    method: str,
    url: str | Target,
    *,
    headers: Mapping[str, str],
    within: float,
    body: bytes | None = None,
    limit: int = MAX_REPLY_BYTES,
) -> WireReply:
    """One request, its answer read whole (at most ``limit`` bytes) within ``within`` seconds.

    Redirects are not followed: a bot endpoint that moved is a misconfiguration to report, and
    following one would replay the User's text (and the Brand's headers) to wherever it points.
    Any status comes back; the caller decides what it means for its bot's API.
    """
    target = url if isinstance(url, Target) else Target.parse(url)
    return await client.request(method, target, headers=headers, body=body, within=within, limit=limit)


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
    client: BotClient,
    method: str,
    url: str | Target,
    *,
    headers: Mapping[str, str],
    within: float,
) -> str:
    """Send ``method`` to ``url`` with the Brand's headers, no body; :func:`probe_verdict` on the status."""
    reply = await exchange(client, method, url, headers=headers, within=within, limit=64 * 1024)
    return probe_verdict(method, reply.status)
