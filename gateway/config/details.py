"""RFC 9396 authorization details types of a delegating Brand: each checked once, at load.

A type's ``fields`` is a JSON Schema the Brand writes, so this is where it is refused when it
could not do its job: not a schema, not an object schema, open to members it does not name, or
pointing outside itself (the validator never fetches). The consent sentence is checked here too,
so a placeholder that names no field fails the file rather than shows a person an empty gap.
"""

from __future__ import annotations

import string
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jsonschema

from gateway.config.errors import ConfigError
from gateway.config.model import AuthorizationDetailType
from gateway.config.problems import _meant

__all__ = ["_detail_types"]

_RESERVED_DETAIL_FIELDS = ("type", "actions")
_OPEN_FIELD_KEYWORDS = ("additionalProperties", "patternProperties", "unevaluatedProperties")


def _detail_fields(fields: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """A type's ``fields``: a valid draft 2020-12 object schema that names every member it accepts.

    Unknown members are always refused (the gateway checks them against ``properties`` before the
    schema runs), so the keywords that would open the object are refused here rather than ignored;
    ``type`` and ``actions`` are RFC 9396's own members, and a ``$ref`` may only point inside.
    """
    try:
        jsonschema.Draft202012Validator.check_schema(fields)
    except jsonschema.SchemaError as error:
        raise ConfigError(path, f"not a valid JSON Schema (draft 2020-12): {error.message}") from None
    if fields.get("type") != "object" or not isinstance(fields.get("properties"), dict):
        raise ConfigError(path, "must be an object schema: type: object, with properties")
    for keyword in _OPEN_FIELD_KEYWORDS:
        if keyword in fields:
            raise ConfigError(f"{path}.{keyword}", "unknown fields are always refused: leave it out")
    for name in _RESERVED_DETAIL_FIELDS:
        if name in fields["properties"]:
            raise ConfigError(f"{path}.properties.{name}", f"{name} is RFC 9396's own member, not a field")
    for ref in _refs(fields):
        if not ref.startswith("#"):
            raise ConfigError(path, f"$ref {ref!r} points outside the schema: only local references")
    return fields


def _refs(schema: Any) -> Iterator[str]:
    """Every ``$ref`` (and ``$dynamicRef``) in a schema, however deep: the validator never fetches one."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                    yield value
                else:
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)


def _consent_template(template: str, known: Sequence[str], path: str) -> str:
    """A consent sentence whose ``{placeholders}`` each name a field (or ``actions``), nothing more."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise ConfigError(path, f"not a sentence with {{field}} placeholders: {error}") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if spec or conversion:
            raise ConfigError(path, f"{{{name}}}: a placeholder is a bare field name")
        if name not in known:
            hint = _meant(name, known)
            meant = f" (did you mean {{{hint}}}?)" if hint else ""
            raise ConfigError(path, f"{{{name}}} is not a field of this type{meant}")
    return template


def _detail_types(
    raw: Sequence[Mapping[str, Any]], scopes: Mapping[str, str], path: str
) -> dict[str, AuthorizationDetailType]:
    """RFC 9396 types, by ``type`` in configuration order: each type once, its scopes on the card."""
    types: dict[str, AuthorizationDetailType] = {}
    for index, item in enumerate(raw):
        here = f"{path}[{index}]"
        if item["type"] in types:
            raise ConfigError(f"{here}.type", f"{item['type']!r} is configured twice")
        for position, scope in enumerate(item["scopes"]):
            if scope not in scopes:
                raise ConfigError(f"{here}.scopes[{position}]", f"{scope!r} is not one of the Brand's scopes")
        fields = _detail_fields(item["fields"], f"{here}.fields")
        known = [*fields["properties"], "actions"]
        types[item["type"]] = AuthorizationDetailType(
            type=item["type"],
            scopes=tuple(scope for scope in scopes if scope in item["scopes"]),
            actions=tuple(item["actions"]),
            fields=fields,
            consent=_consent_template(item["consent"], known, f"{here}.consent"),
        )
    return types
