"""RFC 9396 authorization details for the §5 tests: a delegating Brand with detail types, and the flow
with details as a personal agent and the consent page drive it.

The test Brand (``acme``, :data:`tests.support.delegation.SCOPES`) accepts two types: an order it may
cancel (:data:`ORDER`, a condition of ``orders:cancel``) and an address it may read
(:data:`ADDRESS`, of ``profile:read``); ``orders:read`` has none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
from aiohttp import ClientResponse

from gateway.protocol.authorization_details import canonical_detail, details_of_scopes
from tests.support.delegation import (
    BRAND_USER,
    BrandLogin,
    enable_delegation,
    oauth_server,
    poll_token,
    post_form,
)
from tests.support.gateway import Harness
from tests.support.secrets_scan import remember

__all__ = [
    "ADDRESS",
    "ADDRESS_TYPE",
    "ORDER",
    "ORDER_TYPE",
    "address",
    "approve_details_via_store",
    "authorize_with_details",
    "canonical",
    "details_param",
    "enable_details",
    "obtain_tokens_with_details",
    "order",
]

ORDER = "https://acme.example/rar/order"
ADDRESS = "https://acme.example/rar/address"
ORDER_TYPE: dict[str, Any] = {
    "type": ORDER,
    "scopes": ["orders:cancel"],
    "actions": ["cancel", "refund"],
    "fields": {
        "type": "object",
        "properties": {
            "identifier": {"type": "string", "pattern": "^A-[0-9]{5}$"},
            "reason": {"type": "string", "maxLength": 200},
        },
        "required": ["identifier"],
    },
    "consent": "Only order {identifier}",
}
ADDRESS_TYPE: dict[str, Any] = {
    "type": ADDRESS,
    "scopes": ["profile:read"],
    "actions": ["read"],
    "fields": {
        "type": "object",
        "properties": {"identifier": {"type": "string", "enum": ["home", "work"]}},
        "required": ["identifier"],
    },
    "consent": "Only your {identifier} address",
}


def enable_details(
    login: BrandLogin,
    signing_key_pem: str,
    *,
    types: Sequence[Mapping[str, Any]] = (ORDER_TYPE, ADDRESS_TYPE),
    **overrides: Any,
) -> Callable[[dict[str, Any]], None]:
    """:func:`~tests.support.delegation.enable_delegation` with ``types`` (both by default) and
    ``overrides`` (``max_authorization_details`` …) on the delegating Brand."""
    return enable_delegation(
        login, signing_key_pem, authorization_details=[dict(kind) for kind in types], **overrides
    )


def order(identifier: str = "A-10001", **more: Any) -> dict[str, Any]:
    """An :data:`ORDER` detail for ``identifier``."""
    return {"type": ORDER, "identifier": identifier, **more}


def address(identifier: str = "home", **more: Any) -> dict[str, Any]:
    """An :data:`ADDRESS` detail for ``identifier``."""
    return {"type": ADDRESS, "identifier": identifier, **more}


def canonical(*details: Mapping[str, Any]) -> tuple[str, ...]:
    """The details as the gateway keeps them (RFC 8785 canonical JSON each)."""
    return tuple(canonical_detail(detail) for detail in details)


def details_param(details: Iterable[Mapping[str, Any]]) -> str:
    """The ``authorization_details`` parameter: the details' canonical JSON array."""
    return "[" + ",".join(canonical(*details)) + "]"


async def authorize_with_details(
    h: Harness,
    scopes: Iterable[str],
    details: str | None,
    *,
    sub: str = "alice",
    form: Mapping[str, str] | None = None,
) -> ClientResponse:
    """A device authorization request for ``scopes`` with the ``authorization_details`` text ``details``
    (left out when ``None``), and any more ``form`` parameters; the raw answer."""
    body = {"client_id": h.issuer, "scope": " ".join(scopes), **(form or {})}
    if details is not None:
        body["authorization_details"] = details
    response = await post_form(h, "device_authorization", body, sub=sub)
    if response.status == 200:
        answer = await response.json()
        remember("a device code", answer["device_code"])
        remember("a user code", answer["user_code"])
    return response


async def approve_details_via_store(
    h: Harness,
    started: Mapping[str, Any],
    *,
    scopes: Iterable[str] | None = None,
    user: str = BRAND_USER,
    carried: tuple[str, ...] = (),
    carried_details: tuple[str, ...] = (),
    brand: str = "acme",
) -> tuple[str, ...]:
    """Approve ``started`` as the consent page does with details: the requested details of the ticked
    ``scopes`` (all requested by default), plus ``carried`` scopes and ``carried_details`` from the
    User's live grant. The approved details."""
    server = oauth_server(h)
    now = server.clock()
    remember("a Brand user id", user)
    pending = await server.store.authorization_by_user_code(brand, started["user_code"], now)
    assert pending is not None, "the authorization is not live"
    ticked = pending.scopes if scopes is None else tuple(scopes)
    delegation = h.config.brands[brand].delegation
    assert delegation is not None
    details = details_of_scopes(pending.details, delegation.authorization_details, ticked)
    approved = (*details, *(text for text in carried_details if text not in details))
    assert await server.store.approve(
        brand,
        pending,
        user,
        tuple(scope for scope in delegation.scopes if scope in (*ticked, *carried)),
        now,
        carried=carried,
        details=approved,
        carried_details=carried_details,
    ), "the authorization was not pending"
    return approved


async def obtain_tokens_with_details(
    h: Harness,
    scopes: Iterable[str],
    details: Iterable[Mapping[str, Any]],
    *,
    approve: Iterable[str] | None = None,
    sub: str = "alice",
) -> dict[str, Any]:
    """The whole flow asking ``details``, ``approve`` (default: every requested scope) ticked: the
    token answer, parsed."""
    response = await authorize_with_details(h, scopes, details_param(details), sub=sub)
    assert response.status == 200, await response.text()
    started = await response.json()
    await approve_details_via_store(h, started, scopes=approve)
    polled = await poll_token(h, started["device_code"], sub=sub)
    assert polled.status == 200, await polled.text()
    answer: dict[str, Any] = orjson.loads(await polled.read())
    return answer
