"""Configuration is validated once at start-up; a bad file names the YAML path and the rule."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import ConfigError, load_config, load_config_file
from tests.support.delegation import new_provider_key_pem

ROOT = Path(__file__).resolve().parent.parent
ENV = {"ACME_BOT_TOKEN": "secret-token", "PACT_SIGNING_KEY": new_provider_key_pem()}
DELEGATION: list[str | int] = ["brands", 0, "delegation"]
MAX_ISSUERS: list[str | int] = ["personal_agents", "jwks", "max_cached_issuers"]


def example() -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load((ROOT / "config" / "example.yaml").read_text())
    return raw


def test_example_and_demo_files_load() -> None:
    config = load_config_file(ROOT / "config" / "example.yaml", ENV)
    assert config.brands["acme"].upstream.headers["Authorization"] == "Bearer secret-token"
    assert config.personal_agents.find("https://pa.example.com") is not None
    assert config.cache.backend == "memory"
    demo = load_config_file(ROOT / "config" / "demo.yaml", {"PACT_DEMO_SIGNING_KEY": new_provider_key_pem()})
    assert demo.development is True
    assert demo.brands["acme"].delegation is not None


def test_s5_delegation_block_and_its_defaults() -> None:
    config = load_config(example(), ENV)
    delegation = config.brands["acme"].delegation
    assert delegation is not None
    assert list(delegation.scopes) == ["orders:read", "orders:cancel"]
    assert delegation.login.issuer == "https://login.acme.example"
    assert (delegation.token_ttl, delegation.grant_ttl, delegation.skip_consent) == (3600, 2592000, True)
    assert delegation.landing_url is None
    assert delegation.introspection_secret is None
    assert [key.alg for key in config.oauth.signing_keys] == ["ES256"]
    raw = example()
    raw["brands"][0]["delegation"]["introspection"] = {"secret": "${ACME_INTROSPECTION_SECRET}"}
    with pytest.raises(ConfigError, match="ACME_INTROSPECTION_SECRET is not set"):
        load_config(raw, ENV)
    secret = load_config(raw, {**ENV, "ACME_INTROSPECTION_SECRET": "s3"}).brands["acme"].delegation
    assert secret is not None
    assert secret.introspection_secret == "s3"
    assert "s3" not in repr(secret)


def test_s5_signing_keys_from_files_and_duplicate_kids(tmp_path: Path) -> None:
    pem = new_provider_key_pem()
    (tmp_path / "k.pem").write_text(pem)
    raw = example()
    raw["oauth"]["signing_keys"] = [{"file": str(tmp_path / "k.pem")}, {"value": "${PACT_SIGNING_KEY}"}]
    assert len(load_config(raw, ENV).oauth.signing_keys) == 2
    raw["oauth"]["signing_keys"] = [{"file": str(tmp_path / "k.pem")}, {"value": pem}]
    with pytest.raises(ConfigError, match=r"oauth\.signing_keys\[1\]\.value: duplicate kid"):
        load_config(raw, ENV)


def test_minimal_file_gets_documented_defaults() -> None:
    raw = {
        "public_url": "https://gw.example/",
        "provider": {"organization": "P", "url": "https://p.example", "audience": "aud"},
        "personal_agents": {
            "registered": [{"issuer": "https://pa.example", "jwks_uri": "https://pa.example/j"}]
        },
        "brands": [
            {"id": "b", "name": "B", "description": "d", "version": "1", "upstream": {"url": "http://bot"}}
        ],
    }
    config = load_config(raw, {})
    assert config.public_url == "https://gw.example"
    assert config.listen.port == 8080
    assert config.security_scheme_name == "paJwt"
    assert config.cache.url == "memory://"
    assert config.cache.conversation_ttl == 86400
    assert config.metrics.port == 9090


def _mutate(path: list[str | int], value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(example())
    node: Any = raw
    for part in path[:-1]:
        node = node[part]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return raw


@pytest.mark.parametrize(
    ("path", "value", "where", "why"),
    [
        (["brands", 0, "upstream", "url"], "ftp://bot", "brands[0].upstream.url", "does not match"),
        (["brands", 0, "id"], "bad id!", "brands[0].id", "does not match"),
        (["brands", 0, "name"], KeyError, "brands[0].name", "is required"),
        (["brands", 0, "colour"], "blue", "brands[0].colour", "unknown setting"),
        (["provider", "audience"], 7, "provider.audience", "is not of type 'string'"),
        (["cache", "url"], "mongodb://x", "cache.url", "does not match"),
        (["listen", "port"], 70000, "listen.port", "is greater than the maximum"),
        (["personal_agents", "policy"], "trust-me", "personal_agents.policy", "is not one of"),
        (
            ["personal_agents", "registered", 0, "jwks_uri"],
            "http://pa.example.com/jwks",
            "personal_agents.registered[0].jwks_uri",
            "must use https",
        ),
        (
            ["personal_agents", "registered", 0, "jwks_uri"],
            "https://127.0.0.1/jwks",
            "personal_agents.registered[0].jwks_uri",
            "loopback or private",
        ),
        (
            ["personal_agents", "registered", 0, "jwks_uri"],
            "https://10.1.2.3/jwks",
            "personal_agents.registered[0].jwks_uri",
            "loopback or private",
        ),
        (["cache", "closed_ttl"], 10, "cache.closed_ttl", "at least conversation_ttl"),
        (["cache", "timeout"], 0, "cache.timeout", "less than or equal to the minimum of 0"),
        (MAX_ISSUERS, 0, "personal_agents.jwks.max_cached_issuers", "is less than the minimum of 1"),
        (MAX_ISSUERS, -1, "personal_agents.jwks.max_cached_issuers", "is less than the minimum of 1"),
        (MAX_ISSUERS, 1.5, "personal_agents.jwks.max_cached_issuers", "is not of type 'integer'"),
        (MAX_ISSUERS, "4096", "personal_agents.jwks.max_cached_issuers", "is not of type 'integer'"),
        (MAX_ISSUERS, True, "personal_agents.jwks.max_cached_issuers", "is not of type 'integer'"),
        ([*DELEGATION, "token_ttl"], 7200, "brands[0].delegation.token_ttl", "is greater than the maximum"),
        ([*DELEGATION, "scopes"], {}, "brands[0].delegation.scopes", "should be non-empty"),
        ([*DELEGATION, "scopes", "bad scope"], "x", "brands[0].delegation.scopes", "does not match"),
        ([*DELEGATION, "login", "url"], KeyError, "brands[0].delegation.login.url", "is required"),
        (
            [*DELEGATION, "login", "url"],
            "http://login.acme",
            "brands[0].delegation.login.url",
            "must use https",
        ),
        (
            [*DELEGATION, "login", "jwks_uri"],
            "https://127.0.0.1/jwks",
            "brands[0].delegation.login.jwks_uri",
            "loopback or private",
        ),
        (
            [*DELEGATION, "login", "jwks"],
            {"keys": []},
            "brands[0].delegation.login.jwks_uri",
            "exactly one of jwks_uri and an inline jwks",
        ),
        (
            [*DELEGATION, "landing_url"],
            "http://x.example",
            "brands[0].delegation.landing_url",
            "must use https",
        ),
        ([*DELEGATION, "colour"], "blue", "brands[0].delegation.colour", "unknown setting"),
        (["oauth", "signing_keys"], KeyError, "oauth.signing_keys", "is required: brands[0] enables"),
        (["oauth", "signing_keys", 0], {"value": "junk"}, "oauth.signing_keys[0].value", "PEM private key"),
        (["oauth", "signing_keys", 0], {"file": "/nope.pem"}, "oauth.signing_keys[0].file", "cannot read"),
        (
            ["oauth", "signing_keys", 0],
            {"file": "a", "value": "b"},
            "oauth.signing_keys[0]",
            "exactly one of file and value",
        ),
    ],
)
def test_bad_value_names_its_yaml_path(path: list[str | int], value: Any, where: str, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_mutate(path, value), ENV)
    assert caught.value.path == where
    assert why in caught.value.reason


@pytest.mark.parametrize(("value", "expected"), [(KeyError, 4096), (1, 1), (250_000, 250_000)])
def test_jwks_max_cached_issuers_defaults_to_4096_and_takes_any_positive_integer(
    value: Any, expected: int
) -> None:
    raw = _mutate(MAX_ISSUERS, value)
    assert load_config(raw, ENV).personal_agents.jwks.max_cached_issuers == expected


def test_development_switch_allows_http_loopback_jwks() -> None:
    raw = _mutate(["personal_agents", "registered", 0, "jwks_uri"], "http://127.0.0.1:8000/jwks")
    raw["development"] = True
    assert load_config(raw, ENV).personal_agents.registered[0].jwks_uri == "http://127.0.0.1:8000/jwks"


def test_missing_environment_variable_is_named() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(example(), {})
    assert caught.value.path == "brands[0].upstream.headers.Authorization"
    assert "ACME_BOT_TOKEN" in caught.value.reason


def test_duplicates_are_rejected() -> None:
    raw = example()
    raw["brands"].append(copy.deepcopy(raw["brands"][0]))
    with pytest.raises(ConfigError, match=r"brands\[1\]\.id: duplicate brand id"):
        load_config(raw, ENV)
    raw = example()
    raw["personal_agents"]["registered"][1]["issuer"] = raw["personal_agents"]["registered"][0]["issuer"]
    with pytest.raises(ConfigError, match=r"registered\[1\]\.issuer: duplicate issuer"):
        load_config(raw, ENV)


def test_allowlist_needs_an_agent_and_a_key_source() -> None:
    raw = example()
    raw["personal_agents"]["registered"] = []
    with pytest.raises(ConfigError, match=r"personal_agents\.registered"):
        load_config(raw, ENV)
    raw = example()
    del raw["personal_agents"]["registered"][0]["jwks_uri"]
    with pytest.raises(ConfigError, match=r"registered\[0\]\.jwks_uri: is required unless"):
        load_config(raw, ENV)


def test_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config_file(tmp_path / "missing.yaml", ENV)
    bad = tmp_path / "bad.yaml"
    bad.write_text("brands: [\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_config_file(bad, ENV)
    not_a_map = tmp_path / "list.yaml"
    not_a_map.write_text("- 1\n")
    with pytest.raises(ConfigError, match=r"\(top level\)"):
        load_config_file(not_a_map, ENV)
