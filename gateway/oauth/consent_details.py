"""§5.3 with RFC 9396 ``authorization_details``: where the consent page shows each detail, and what a
decision grants.

A detail is a condition of one scope, never a choice of its own: the page shows it under the
scope it belongs to, and the scope's checkbox approves or drops it with the scope. So what a
decision grants is computed here from the stored authorization, the earlier grant and the scopes
the User left ticked, never from anything the form could name (a forged form field adding a
detail has nothing to add it to). A step-up carries the earlier grant's details like its scopes:
those of a scope the new grant keeps. A grant holds at most ``max_authorization_details``
details in at most ``max_authorization_details_bytes``: the requested ones first, then the
carried ones while they fit; the rest is dropped, and the person is shown which.

Pure: the handler (:mod:`gateway.handlers.oauth.consent`) reads the store and renders the pages.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from gateway.config import AuthorizationDetailType, DelegationConfig
from gateway.protocol.authorization_details import details_of_scopes, scope_of
from gateway.store.oauth import DeviceAuthorization, Grant

__all__ = [
    "GrantedDetails",
    "granted_details",
    "held_details",
    "requested_details",
    "skip_covers_details",
    "under_scopes",
]


@dataclass(frozen=True, slots=True)
class GrantedDetails:
    """What one decision grants of RFC 9396 details, each as its canonical JSON text."""

    details: tuple[str, ...]
    """The new grant's: the requested ones of ticked scopes, then the carried ones, as many as fit."""
    carried: tuple[str, ...]
    """Those of :attr:`details` that come from the earlier grant."""
    dropped: tuple[str, ...]
    """The earlier grant's details the new grant does not keep (their scope unticked, or no room
    left), and any requested one that found no room: the landing page names them all."""


def requested_details(delegation: DelegationConfig, authorization: DeviceAuthorization) -> tuple[str, ...]:
    """The requested details a decision may still grant: each a condition of a requested scope.

    The request was checked when it was made; a type removed from the configuration since then
    is no longer granted (nor shown).
    """
    return details_of_scopes(authorization.details, delegation.authorization_details, authorization.scopes)


def held_details(
    delegation: DelegationConfig, authorization: DeviceAuthorization, earlier: Grant | None
) -> tuple[str, ...]:
    """The earlier grant's details the new one could carry: a configured type, a condition of one
    of that grant's scopes, and not asked again now (a requested detail is shown, and granted, as
    requested). ``earlier`` is the live grant of the same agent and ``sub``, or ``None``."""
    if earlier is None:
        return ()
    asked = set(authorization.details)
    held = details_of_scopes(earlier.details, delegation.authorization_details, earlier.scopes)
    return tuple(text for text in held if text not in asked)


def under_scopes(
    details: Sequence[str], types: Mapping[str, AuthorizationDetailType], scopes: Sequence[str]
) -> dict[str, tuple[str, ...]]:
    """``details`` by the scope of ``scopes`` each is a condition of (:func:`scope_of`), in their
    order; a detail that belongs to none of ``scopes`` is left out."""
    grouped: dict[str, list[str]] = {}
    for text in details:
        scope = scope_of(text, types, scopes)
        if scope is not None:
            grouped.setdefault(scope, []).append(text)
    return {scope: tuple(texts) for scope, texts in grouped.items()}


def _fitting(details: Sequence[str], max_count: int, max_bytes: int) -> tuple[str, ...]:
    """The leading ``details`` that fit in one grant: at most ``max_count``, and their JSON array
    (``[d1,d2]``, as the token carries it) at most ``max_bytes`` of UTF-8; one that does not fit
    is skipped and a smaller one after it may still go in."""
    kept: list[str] = []
    size = 2  # the brackets
    for text in details:
        grown = size + len(text.encode()) + (1 if kept else 0)
        if len(kept) < max_count and grown <= max_bytes:
            kept.append(text)
            size = grown
    return tuple(kept)


def granted_details(
    delegation: DelegationConfig,
    authorization: DeviceAuthorization,
    earlier: Grant | None,
    *,
    ticked: Collection[str],
    scopes: Collection[str],
) -> GrantedDetails:
    """What a decision grants of the requested details and of the earlier grant's.

    ``ticked`` are the requested scopes the User left ticked, ``scopes`` every scope of the new
    grant (``ticked`` and the carried ones). A requested detail is granted when the scope the
    page showed it under (its scope among the requested ones) is ticked: ``ticked``, not
    ``scopes``, so that a ``keep`` field naming an unticked requested scope (which may carry that
    scope from the earlier grant) never grants the details asked with it. An earlier detail is
    carried when the scope it was shown under (its scope in the earlier grant) is one the new
    grant keeps.
    """
    types = delegation.authorization_details
    asked = tuple(
        text
        for text in requested_details(delegation, authorization)
        if scope_of(text, types, authorization.scopes) in ticked
    )
    held = held_details(delegation, authorization, earlier)
    held_scopes = () if earlier is None else earlier.scopes
    offered = tuple(text for text in held if scope_of(text, types, held_scopes) in scopes)
    details = _fitting(
        asked + offered, delegation.max_authorization_details, delegation.max_authorization_details_bytes
    )
    kept = set(details)
    return GrantedDetails(
        details=details,
        carried=tuple(text for text in details if text in held),
        dropped=tuple(text for text in asked + held if text not in kept),
    )


def skip_covers_details(authorization: DeviceAuthorization, grant: Grant) -> bool:
    """§5.3 "an unexpired grant already covers the request", for details: every requested detail is
    one the grant holds, byte for byte (canonical JSON: the same detail is the same text). A
    detail that only resembles a granted one (another order, another flight) asks the User."""
    return set(authorization.details) <= set(grant.details)
