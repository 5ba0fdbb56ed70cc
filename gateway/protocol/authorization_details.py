"""RFC 9396 rich authorization requests: one Brand's ``authorization_details``, checked and compared.

Scopes say what kind of thing a personal agent may do; a detail names one concrete thing
("cancel order A-10001, and nothing else"). Each detail type a Brand accepts is configured
(:class:`~gateway.config.AuthorizationDetailType`): its fields' JSON Schema, the scopes it
belongs to, the actions it allows and the sentence the consent page shows for it.

Pure. Inside the gateway a detail is its RFC 8785 canonical JSON text: the store keeps it, the
token and the receipt carry it, and two details are the same exactly when their texts are.
Canonical JSON has no whitespace and escapes every control character, so a newline never occurs
in one, and a tuple of them can be kept as one string joined by newlines (the Redis store does).
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import Any, Final

import jsonschema
import orjson
import rfc8785

from gateway.config import AuthorizationDetailType

__all__ = [
    "DETAIL_SEPARATOR",
    "InvalidAuthorizationDetails",
    "canonical_detail",
    "check_bound_detail",
    "consent_sentence",
    "covering",
    "covers",
    "decode_detail",
    "detail_type",
    "details_json",
    "details_of_scopes",
    "join_details",
    "parse_authorization_details",
    "scope_of",
    "split_details",
]

DETAIL_SEPARATOR: Final = "\n"
"""Never inside a canonical detail (RFC 8785 escapes control characters): joins a tuple of them."""

_TypeMap = Mapping[str, AuthorizationDetailType]


class InvalidAuthorizationDetails(Exception):
    """RFC 9396 §5 ``invalid_authorization_details``.

    ``reason`` is the ``error_description``: a fixed sentence in RFC 6749 §5.2's character set
    that never quotes the client's input (a type or field name could carry anything).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def canonical_detail(detail: Mapping[str, Any]) -> str:
    """The RFC 8785 canonical JSON of one detail, as text."""
    try:
        return rfc8785.dumps(detail).decode()
    except rfc8785.CanonicalizationError:
        # orjson takes integers beyond ±2^53 and RFC 8785 refuses them: not a detail we can keep.
        raise InvalidAuthorizationDetails("a detail holds a number JSON cannot carry exactly") from None


def decode_detail(text: str) -> dict[str, Any]:
    """A canonical detail back as an object."""
    detail: dict[str, Any] = orjson.loads(text)
    return detail


def detail_type(text: str) -> str:
    """The ``type`` of a canonical detail."""
    kind: str = decode_detail(text)["type"]
    return kind


def join_details(details: Sequence[str]) -> str:
    """One string for a tuple of canonical details (``""`` for none): how a store keeps them."""
    return DETAIL_SEPARATOR.join(details)


def split_details(joined: str) -> tuple[str, ...]:
    """:func:`join_details` undone; ``""`` (a record written before details existed) is none."""
    return tuple(joined.split(DETAIL_SEPARATOR)) if joined else ()


def details_json(details: Sequence[str]) -> orjson.Fragment:
    """The JSON array of ``details``, their canonical texts as they are: the bytes that were approved."""
    return orjson.Fragment(f"[{','.join(details)}]")


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value: a scalar is 0, ``[]`` and ``{}`` are 1."""
    deepest, level, stack = 0, 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            level += 1
            stack.extend((child, level) for child in item.values())
        elif isinstance(item, list):
            level += 1
            stack.extend((child, level) for child in item)
        deepest = max(deepest, level)
    return deepest


def _actions_valid(actions: Any, allowed: Sequence[str]) -> bool:
    """RFC 9396 §2.2 ``actions``: a non-empty list of distinct strings, each one the type allows."""
    return (
        isinstance(actions, list)
        and bool(actions)
        and all(isinstance(action, str) and action in allowed for action in actions)
        and len(set(actions)) == len(actions)
    )


def _fields_valid(detail: Mapping[str, Any], kind: AuthorizationDetailType) -> bool:
    """The members other than ``type`` and ``actions`` against the type's schema, unknown ones refused."""
    fields = {name: value for name, value in detail.items() if name not in ("type", "actions")}
    known = kind.fields.get("properties", {})
    if not fields.keys() <= known.keys():
        return False
    return jsonschema.Draft202012Validator(kind.fields).is_valid(fields)


def _check_detail(detail: Any, types: _TypeMap) -> AuthorizationDetailType:
    """One detail's shape against its configured type; the type, or :class:`InvalidAuthorizationDetails`."""
    if not isinstance(detail, dict):
        raise InvalidAuthorizationDetails("each authorization detail must be a JSON object")
    kind_name = detail.get("type")
    kind = types.get(kind_name) if isinstance(kind_name, str) else None
    if kind is None:
        raise InvalidAuthorizationDetails("an authorization detail has a type this server does not support")
    if "actions" in detail and not _actions_valid(detail["actions"], kind.actions):
        raise InvalidAuthorizationDetails("an authorization detail asks an action its type does not allow")
    if not _fields_valid(detail, kind):
        raise InvalidAuthorizationDetails(
            "an authorization detail has a field its type does not allow, or lacks a required one"
        )
    return kind


def parse_authorization_details(
    raw: str,
    *,
    types: _TypeMap,
    scopes: Sequence[str],
    max_count: int,
    max_bytes: int,
    max_depth: int,
) -> tuple[str, ...]:
    """An ``authorization_details`` request parameter (RFC 9396 §2, §3) as canonical details.

    Refused (:class:`InvalidAuthorizationDetails`, RFC 9396 §5), checked cheapest first: more
    than ``max_bytes`` of UTF-8, not JSON, not an array, an empty one, more than ``max_count``
    details, one nested deeper than ``max_depth``, one that is not an object, an unknown
    ``type``, an action the type does not allow, a field its schema does not allow or a missing
    required one, and a detail none of whose type's scopes is among ``scopes`` (the same
    request's: a detail is a condition of a scope, never granted on its own). The details come
    back in request order, a repeated one once.
    """
    if len(raw.encode()) > max_bytes:
        raise InvalidAuthorizationDetails("authorization_details is larger than this server accepts")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidAuthorizationDetails("authorization_details is not JSON") from None
    if not isinstance(value, list):
        raise InvalidAuthorizationDetails("authorization_details is not a JSON array")
    if not value:
        raise InvalidAuthorizationDetails("authorization_details is empty")
    if len(value) > max_count:
        raise InvalidAuthorizationDetails("authorization_details has more details than this server accepts")
    details: dict[str, None] = {}
    for detail in value:
        if _depth(detail) > max_depth:
            raise InvalidAuthorizationDetails("an authorization detail is nested deeper than accepted")
        kind = _check_detail(detail, types)
        if not any(scope in scopes for scope in kind.scopes):
            raise InvalidAuthorizationDetails("an authorization detail belongs to no scope of this request")
        details[canonical_detail(detail)] = None
    return tuple(details)


def scope_of(text: str, types: _TypeMap, scopes: Sequence[str]) -> str | None:
    """The scope a detail is a condition of in a request of ``scopes``: the first of its type's scopes
    (card order) that ``scopes`` holds; ``None`` when none does or its type is no longer configured."""
    kind = types.get(detail_type(text))
    if kind is None:
        return None
    return next((scope for scope in kind.scopes if scope in scopes), None)


def details_of_scopes(details: Sequence[str], types: _TypeMap, scopes: Sequence[str]) -> tuple[str, ...]:
    """Those of ``details`` that belong to one of ``scopes``.

    How a scope left unticked on the consent page, or narrowed away by a refresh, takes its
    details with it; and how a type removed from the configuration stops being granted.
    """
    return tuple(text for text in details if scope_of(text, types, scopes) is not None)


def covers(granted: str, used: Mapping[str, Any], types: _TypeMap) -> bool:
    """Whether the granted detail allows what ``used`` names (RFC 9396 §2: the details are the grant).

    Same type; every member of ``used`` but ``actions`` present in ``granted`` with an equal
    value (so the resource, ``identifier``, and every condition such as a target flight match);
    and ``used``'s actions among ``granted``'s (a granted detail without ``actions`` allows its
    type's configured ones). A type no longer configured covers nothing.
    """
    detail = decode_detail(granted)
    kind = types.get(detail["type"])
    if kind is None or used.get("type") != detail["type"]:
        return False
    for name, value in used.items():
        if name != "actions" and (name not in detail or detail[name] != value):
            return False
    allowed = detail.get("actions", list(kind.actions))
    return all(action in allowed for action in used.get("actions", ()))


def covering(granted: Sequence[str], used: Mapping[str, Any], types: _TypeMap) -> str | None:
    """The first of ``granted`` that :func:`covers` ``used``, or ``None``."""
    return next((text for text in granted if covers(text, used, types)), None)


def check_bound_detail(used: Any, types: _TypeMap) -> str:
    """A detail a bot names for an action bound to a resource: its canonical text.

    It must say which resource and what was done to it: an object with ``type``, ``identifier``
    and a non-empty ``actions``, valid for its configured type as a request's detail would be
    (so a step-up can ask the person for exactly it). Otherwise :class:`InvalidAuthorizationDetails`.
    """
    _check_detail(used, types)
    if "identifier" not in used or "actions" not in used:
        raise InvalidAuthorizationDetails("a resource-bound action must name its identifier and actions")
    return canonical_detail(used)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ", ".join(_shown(item) for item in value)
    return orjson.dumps(value).decode()


def consent_sentence(text: str, types: _TypeMap) -> str:
    """The type's consent sentence with the detail's fields put in (plain text: the page escapes it).

    A field the detail leaves out shows as nothing; a list as its items joined by ", ". A type
    no longer configured shows the detail's JSON, so a person is never shown less than is granted.
    """
    detail = decode_detail(text)
    kind = types.get(detail["type"])
    if kind is None:
        return text
    parts = []
    for literal, name, _, _ in string.Formatter().parse(kind.consent):
        parts.append(literal)
        if name is not None:
            parts.append(_shown(detail[name]) if name in detail else "")
    return "".join(parts)
