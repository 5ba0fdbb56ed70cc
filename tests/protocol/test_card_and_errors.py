"""§2.1 card shape and §6 envelopes, as pure functions."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from gateway.config import BrandConfig, GatewayConfig, ProviderConfig, SkillConfig, UpstreamConfig
from gateway.protocol.card import build_card, etag_matches, render_card
from gateway.protocol.errors import Reason, envelope
from gateway.protocol.tasks import parse_page_size

BRAND = BrandConfig(
    id="acme",
    name="Acme Support",
    description="Orders.",
    version="1.2.3",
    upstream=UpstreamConfig(url="http://bot"),
    skills=(SkillConfig("orders", "Orders", "Order status and changes.", ("orders",)),),
)
CONFIG = GatewayConfig(
    public_url="https://gw.example",
    provider=ProviderConfig("Example Provider", "https://provider.example", "aud-1"),
    brands={"acme": BRAND},
)


def test_s2_1_card_has_exactly_the_spec_shape() -> None:
    assert build_card(CONFIG, BRAND) == {
        "name": "Acme Support",
        "description": "Orders.",
        "supportedInterfaces": [
            {"url": "https://gw.example/a2a/acme", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ],
        "provider": {"organization": "Example Provider", "url": "https://provider.example"},
        "version": "1.2.3",
        "capabilities": {"streaming": False, "pushNotifications": False, "extendedAgentCard": False},
        "securitySchemes": {"paJwt": {"httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT"}}},
        "securityRequirements": [{"schemes": {"paJwt": {"list": []}}}],
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [
            {"id": "orders", "name": "Orders", "description": "Order status and changes.", "tags": ["orders"]}
        ],
    }


def test_s2_1_scheme_name_is_configurable() -> None:
    card = build_card(replace(CONFIG, security_scheme_name="platformJwt"), BRAND)
    assert list(card["securitySchemes"]) == ["platformJwt"]
    assert card["securityRequirements"] == [{"schemes": {"platformJwt": {"list": []}}}]


def test_card_etag_is_stable_and_conditional() -> None:
    first, second = render_card(CONFIG, BRAND), render_card(CONFIG, BRAND)
    assert first == second
    assert orjson.loads(first.body)["name"] == "Acme Support"
    assert etag_matches(first.etag, first.etag)
    assert etag_matches(f'"other", W/{first.etag}', first.etag)
    assert etag_matches("*", first.etag)
    assert not etag_matches('"other"', first.etag)
    assert not etag_matches(None, first.etag)
    assert render_card(CONFIG, replace(BRAND, version="2")).etag != first.etag


@pytest.mark.parametrize(
    ("reason", "name", "code", "status"),
    [
        (Reason.INVALID_PARAMS, "INVALID_PARAMS", 400, "INVALID_ARGUMENT"),
        (Reason.CONTENT_TYPE_NOT_SUPPORTED, "CONTENT_TYPE_NOT_SUPPORTED", 400, "INVALID_ARGUMENT"),
        (Reason.UNSUPPORTED_OPERATION, "UNSUPPORTED_OPERATION", 400, "FAILED_PRECONDITION"),
        (
            Reason.PUSH_NOTIFICATION_NOT_SUPPORTED,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            400,
            "FAILED_PRECONDITION",
        ),
        (Reason.TASK_NOT_FOUND, "TASK_NOT_FOUND", 404, "NOT_FOUND"),
        (Reason.INTERNAL, "INTERNAL", 500, "INTERNAL"),
    ],
)
def test_s6_envelope(reason: Reason, name: str, code: int, status: str) -> None:
    assert orjson.loads(envelope(reason, "msg")) == {
        "error": {
            "code": code,
            "status": status,
            "message": "msg",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reason.name,
                    "domain": "a2a-protocol.org",
                }
            ],
        }
    }


@pytest.mark.parametrize(("raw", "size"), [(None, 50), ("1", 1), ("100", 100), (" 7 ", 7)])
def test_s2_2_page_size(raw: str | None, size: int) -> None:
    assert parse_page_size(raw) == size


@pytest.mark.parametrize("raw", ["0", "101", "-1", "abc", "", "1.5", "٣"])
def test_s2_2_bad_page_size(raw: str) -> None:
    with pytest.raises(Exception, match="Invalid pageSize"):
        parse_page_size(raw)
