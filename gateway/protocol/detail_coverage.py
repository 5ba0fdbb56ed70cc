"""RFC 9396 at the turn: whether a token's details cover what the bot did or asks, and what a
§5.5 step-up must ask the person for when they do not.

A bot acting on one resource (cancelling order A-10002) says so with the detail its action used;
the token's approved details are the grant (RFC 9396 §2), so the action is signed into a receipt
only when one of them covers it, and the receipt names that one. A bot may also ask before it
acts, with the details it needs. Whatever no approved detail covers is asked for in a new device
authorization, each detail with the scope it is a condition of.

Pure: the turn service (:mod:`gateway.turns`) calls it with the token's details, the bot's
reply and the Brand's configuration, and does the I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from gateway.config import AuthorizationDetailType, DelegationConfig
from gateway.protocol.authorization_details import (
    InvalidAuthorizationDetails,
    check_bound_detail,
    covering,
    decode_detail,
    parse_authorization_details,
    scope_of,
)

__all__ = ["Coverage", "coverage", "step_up_request"]


class Coverage(NamedTuple):
    """What the token's details say of one reply."""

    covering: tuple[str | None, ...]
    """Per action, the granted detail that covers it (``None``: bound to no resource, or uncovered);
    ``()`` when no action is bound to one."""
    needed: tuple[str, ...]
    """The details no granted one covers, each once: the actions' first, then the ones asked for."""


def coverage(
    granted: Sequence[str],
    used: Sequence[str | None],
    required: Sequence[str],
    types: Mapping[str, AuthorizationDetailType],
) -> Coverage:
    """The token's ``granted`` details against the detail each action ``used`` and those ``required``.

    A used detail must be one its Brand's configuration accepts for a resource-bound action
    (:func:`~gateway.protocol.authorization_details.check_bound_detail`): else
    :class:`InvalidAuthorizationDetails`, the bot's fault, as an action no detail type could ever
    cover would be asked of the person in vain. A required detail is checked only when it has to
    be asked for (:func:`step_up_request`): one a granted detail covers asks nothing.
    """
    needed: dict[str, None] = {}
    found: list[str | None] = []
    for text in used:
        if text is None:
            found.append(None)
            continue
        detail = decode_detail(text)
        check_bound_detail(detail, types)
        match = covering(granted, detail, types)
        found.append(match)
        if match is None:
            needed[text] = None
    for text in required:
        if covering(granted, decode_detail(text), types) is None:
            needed[text] = None
    return Coverage(tuple(found) if used else (), tuple(needed))


def step_up_request(
    missing: Sequence[str], needed: Sequence[str], delegation: DelegationConfig
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The scopes (card order) and details a step-up's device authorization asks.

    The scopes are the ``missing`` ones and, for each ``needed`` detail, the first of its type's
    scopes on the card: a detail is a condition of a scope in the same request (RFC 9396 §2 as
    the device endpoint applies it). The details are checked as a personal agent's request would
    be (type, schema, actions, the Brand's caps); one that fails is
    :class:`InvalidAuthorizationDetails`, the bot's fault, since the person could never approve it.
    """
    types = delegation.authorization_details
    card = tuple(delegation.scopes)
    wanted = set(missing)
    for text in needed:
        scope = scope_of(text, types, card)
        if scope is None:
            raise InvalidAuthorizationDetails(
                "an authorization detail has a type this server does not support"
            )
        wanted.add(scope)
    scopes = tuple(scope for scope in card if scope in wanted)
    if not needed:
        return scopes, ()
    details = parse_authorization_details(
        f"[{','.join(needed)}]",
        types=types,
        scopes=scopes,
        max_count=delegation.max_authorization_details,
        max_bytes=delegation.max_authorization_details_bytes,
        max_depth=delegation.max_authorization_details_depth,
    )
    return scopes, details
