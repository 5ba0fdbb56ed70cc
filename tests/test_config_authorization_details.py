"""RFC 9396 detail types per delegating Brand: validated at load, a bad one named by its YAML path."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.config import ConfigError, load_config
from tests.test_config import ENV, example

ORDER = "https://acme.example/rar/order"


def with_types(*types: dict[str, Any], **settings: Any) -> dict[str, Any]:
    raw = example()
    raw["brands"][0]["delegation"]["authorization_details"] = list(types)
    raw["brands"][0]["delegation"].update(settings)
    return raw


def order_type(**changes: Any) -> dict[str, Any]:
    kind: dict[str, Any] = {
        "type": ORDER,
        "scopes": ["orders:cancel"],
        "actions": ["cancel"],
        "fields": {
            "type": "object",
            "properties": {"identifier": {"type": "string"}},
            "required": ["identifier"],
        },
        "consent": "Only order {identifier}",
    }
    kind.update(changes)
    return kind


def test_rfc9396_types_load_with_their_defaults() -> None:
    delegation = load_config(with_types(order_type()), ENV).brands["acme"].delegation
    assert delegation is not None
    kind = delegation.authorization_details[ORDER]
    assert (kind.scopes, kind.actions) == (("orders:cancel",), ("cancel",))
    assert kind.consent == "Only order {identifier}"
    assert (
        delegation.max_authorization_details,
        delegation.max_authorization_details_bytes,
        delegation.max_authorization_details_depth,
    ) == (8, 4096, 8)
    plain = load_config(example(), ENV).brands["acme"].delegation
    assert plain is not None
    assert dict(plain.authorization_details) == {}


FIELDS = "brands[0].delegation.authorization_details[0]"


@pytest.mark.parametrize(
    ("kind", "path", "why"),
    [
        (order_type(scopes=["orders:refund"]), f"{FIELDS}.scopes[0]", "not one of the Brand's scopes"),
        (order_type(type="not a uri"), f"{FIELDS}.type", ""),
        (order_type(actions=[]), f"{FIELDS}.actions", ""),
        (order_type(fields={"type": "string"}), f"{FIELDS}.fields", "object schema"),
        (
            order_type(fields={"type": "object", "properties": {"x": {"type": 5}}}),
            f"{FIELDS}.fields",
            "JSON Schema",
        ),
        (
            order_type(fields={"type": "object", "properties": {}, "additionalProperties": True}),
            f"{FIELDS}.fields.additionalProperties",
            "always refused",
        ),
        (
            order_type(fields={"type": "object", "properties": {"actions": {}}}),
            f"{FIELDS}.fields.properties.actions",
            "RFC 9396",
        ),
        (
            order_type(fields={"type": "object", "properties": {"x": {"$ref": "https://evil.example/s"}}}),
            f"{FIELDS}.fields",
            "only local references",
        ),
        (order_type(consent="Only order {identifer}"), f"{FIELDS}.consent", "did you mean {identifier}"),
        (order_type(consent="Only order {identifier!r}"), f"{FIELDS}.consent", "bare field name"),
        (order_type(consent="Only order {identifier"), f"{FIELDS}.consent", "placeholders"),
    ],
)
def test_a_bad_detail_type_names_its_yaml_path(kind: dict[str, Any], path: str, why: str) -> None:
    with pytest.raises(ConfigError) as bad:
        load_config(with_types(kind), ENV)
    assert bad.value.path == path
    assert why in bad.value.reason


def test_a_type_twice_and_limits_out_of_range_are_refused() -> None:
    with pytest.raises(ConfigError) as twice:
        load_config(with_types(order_type(), copy.deepcopy(order_type())), ENV)
    assert twice.value.path == "brands[0].delegation.authorization_details[1].type"
    with pytest.raises(ConfigError) as big:
        load_config(with_types(order_type(), max_authorization_details=65), ENV)
    assert big.value.path == "brands[0].delegation.max_authorization_details"


def test_rfc9396_the_details_byte_cap_keeps_a_delegation_token_within_a_header() -> None:
    """Details ride in every delegation token (``MAX_TOKEN_LENGTH``, 8192 characters, one header):
    more than 4096 bytes of them would mint tokens no turn could take."""
    assert load_config(with_types(order_type(), max_authorization_details_bytes=4096), ENV)
    with pytest.raises(ConfigError) as big:
        load_config(with_types(order_type(), max_authorization_details_bytes=4097), ENV)
    assert big.value.path == "brands[0].delegation.max_authorization_details_bytes"
