"""What the HTTP adapters share: one bounded exchange with a bot, its failures as bounded labels,
the pseudonymous user id a bot sees, the probe's verdict on a status, and a JSON reply's §5 claims
(``requires_scopes``, ``actions``, ``scopes_used``, and RFC 9396's ``requires_authorization_details``
and an action's ``authorization_detail``), read alike by the native contract and the mapped one.

Every call goes through the process's :class:`~gateway.upstream.client.BotClient`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson
import rfc8785

from gateway.upstream.base import Action, BotReply, Turn, UpstreamError
from gateway.upstream.client import BotClient, Target, WireReply

__all__ = [
    "MAX_LIST_ITEMS",
    "MAX_REPLY_BYTES",
    "MAX_REPLY_DEPTH",
    "MAX_TOOL_LENGTH",
    "WRONG_MESSAGE",
    "WireReply",
    "exchange",
    "loads_reply",
    "nested_deeper_than",
    "parse_actions",
    "parse_required_details",
    "parse_scopes",
    "probe_endpoint",
    "probe_verdict",
    "reply_with_claims",
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


MAX_LIST_ITEMS: Final = 64
"""At most this many scopes or actions in one reply: a turn's receipt stays small."""
MAX_TOOL_LENGTH: Final = 128

# RFC 6749 §3.3 scope-token, as the configuration's scope ids (a scope no card can list is a bad reply).
_SCOPE_ID = re.compile(r"[\x21\x23-\x5B\x5D-\x7E]{1,128}")
_ACTION_KEYS: Final = frozenset(("tool", "args", "authorization_detail"))
MAX_DETAIL_TYPE_LENGTH: Final = 256
"""A detail's ``type`` is a URI the configuration holds to 256 characters: a longer one names no type."""


def _list(value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise UpstreamError("bad_body", f"{name} is not a list")
    if len(value) > MAX_LIST_ITEMS:
        raise UpstreamError("bad_body", f"{name} has more than {MAX_LIST_ITEMS} items")
    return value


def parse_scopes(value: Any, name: str) -> tuple[str, ...]:
    """A bot's ``requires_scopes`` or ``scopes_used`` (``None``: none): scope ids in its order, each once."""
    scopes = _list(value, name)
    for scope in scopes:
        if not isinstance(scope, str) or not _SCOPE_ID.fullmatch(scope):
            raise UpstreamError("bad_body", f"{name} holds something that is not a scope id")
    return tuple(dict.fromkeys(scopes))


def _canonical(value: Any, what: str) -> bytes:
    """RFC 8785 canonical JSON of a value orjson parsed, which may hold what RFC 8785 refuses
    (integers beyond ±2^53, which JSON numbers cannot carry exactly): then a bad reply."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        raise UpstreamError("bad_body", f"{what} cannot be canonicalized (RFC 8785)") from None


def _detail(value: Any, what: str, *, bound: bool) -> str:
    """A detail a bot names (RFC 9396 §2), checked for shape only, as its canonical JSON.

    The adapter knows no Brand's detail types: whether the type is configured and the fields
    its schema allows is the turn service's check. Here: an object with a ``type`` string and,
    for an action bound to a resource (``bound``), the ``identifier`` of that resource and the
    non-empty list of distinct ``actions`` done to it (RFC 9396 §2.2).
    """
    if not isinstance(value, dict):
        raise UpstreamError("bad_body", f"{what} is not an object")
    kind = value.get("type")
    if not isinstance(kind, str) or not kind or len(kind) > MAX_DETAIL_TYPE_LENGTH:
        raise UpstreamError("bad_body", f"{what} has no type")
    if bound:
        identifier, actions = value.get("identifier"), value.get("actions")
        if not isinstance(identifier, str) or not identifier:
            raise UpstreamError("bad_body", f"{what} names no identifier")
        if (
            not isinstance(actions, list)
            or not actions
            or len(actions) > MAX_LIST_ITEMS
            or not all(isinstance(action, str) and action for action in actions)
            or len(set(actions)) != len(actions)
        ):
            raise UpstreamError("bad_body", f"{what} has no list of distinct actions")
    return _canonical(value, what).decode()


def parse_required_details(value: Any) -> tuple[str, ...]:
    """A bot's ``requires_authorization_details`` (``None``: none): canonical details, in its order, each
    once."""
    details = _list(value, "requires_authorization_details")
    return tuple(
        dict.fromkeys(_detail(item, "a required authorization detail", bound=False) for item in details)
    )


def parse_actions(value: Any) -> tuple[tuple[Action, ...], tuple[str | None, ...]]:
    """A bot's ``actions`` (``None``: none), each argument canonicalized for the §5.6 receipt; and the
    detail each action says it used (``authorization_detail``), or ``()`` when none names one."""
    actions: list[Action] = []
    used: list[str | None] = []
    for item in _list(value, "actions"):
        if not isinstance(item, dict) or not item.keys() <= _ACTION_KEYS:
            raise UpstreamError(
                "bad_body",
                'actions items must be objects with "tool", optional "args" and "authorization_detail"',
            )
        tool = item.get("tool")
        if not isinstance(tool, str) or not tool.strip() or len(tool) > MAX_TOOL_LENGTH:
            raise UpstreamError("bad_body", "an action's tool is not a non-empty string")
        args = item.get("args")
        # §5.6 argsHash is over RFC 8785 canonical JSON.
        actions.append(Action(tool) if args is None else Action(tool, _canonical(args, "an action's args")))
        detail = item.get("authorization_detail")
        used.append(
            None if detail is None else _detail(detail, "an action's authorization_detail", bound=True)
        )
    return tuple(actions), (tuple(used) if any(detail is not None for detail in used) else ())


def reply_with_claims(
    text: str, end: bool, *, requires: Any, actions: Any, used: Any, required_details: Any
) -> BotReply:
    """The reply of ``text`` and ``end`` with its §5 and RFC 9396 members (each ``None`` when absent)."""
    parsed, action_details = parse_actions(actions)
    return BotReply(
        text,
        end,
        parse_scopes(requires, "requires_scopes"),
        parsed,
        parse_scopes(used, "scopes_used"),
        parse_required_details(required_details),
        action_details,
    )
