"""Configuration is validated once at start-up; a bad file names the YAML path and the rule."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import (
    _PATTERN_RULES,
    MAX_AGENT_NAME,
    SCHEMA,
    ConfigError,
    RateRule,
    check_config,
    check_config_file,
    config_document_from_stream,
    config_warnings,
    load_config,
    load_config_file,
    read_config_document,
)
from gateway.demo import DEFAULT_CONFIG
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
    demo = load_config(
        read_config_document(DEFAULT_CONFIG), {"PACT_DEMO_SIGNING_KEY": new_provider_key_pem()}
    )
    assert demo.development is True
    assert demo.brands["acme"].delegation is not None


def test_s5_delegation_block_and_its_defaults() -> None:
    config = load_config(example(), ENV)
    delegation = config.brands["acme"].delegation
    assert delegation is not None
    assert list(delegation.scopes) == ["orders:read", "orders:cancel"]
    assert delegation.login.issuer == "https://login.acme.example"
    assert (delegation.token_ttl, delegation.grant_ttl, delegation.skip_consent) == (3600, 2592000, True)
    assert delegation.refresh_grace == 0  # off: PACT refuses a spent refresh token at once
    assert delegation.landing_url is None
    assert delegation.introspection_secret is None
    assert [key.alg for key in config.oauth.signing_keys] == ["ES256"]
    raw = example()
    raw["brands"][0]["delegation"]["introspection"] = {"secret": "${ACME_INTROSPECTION_SECRET}"}
    with pytest.raises(ConfigError, match="ACME_INTROSPECTION_SECRET is not set"):
        load_config(raw, ENV)
    value = "s3" * 16
    secret = load_config(raw, {**ENV, "ACME_INTROSPECTION_SECRET": value}).brands["acme"].delegation
    assert secret is not None
    assert secret.introspection_secret == value
    assert value not in repr(secret)


@pytest.mark.parametrize(
    ("introspection", "problem"),
    [
        ({"secret": "s3"}, "introspection.secret: must be an environment variable reference ${NAME}"),
        ({"secret": "x" * 40}, "introspection.secret: must be an environment variable reference ${NAME}"),
        ({"secret": "${SHORT}"}, "introspection.secret: must be at least 32 characters"),
        ({"secret": "${LONG}", "failures": {"rate": 0}}, "introspection.failures.rate: 0 is less than"),
        ({"secret": "${LONG}", "failures": {"burst": 0}}, "introspection.failures.burst: 0 is less than"),
    ],
)
def test_s5_introspection_secret_follows_the_admin_tokens_rules(
    introspection: dict[str, Any], problem: str
) -> None:
    """Issue 18 F7: a 2-character literal used to pass; now only ``${NAME}``, at least 32 characters."""
    raw = example()
    raw["brands"][0]["delegation"]["introspection"] = introspection
    with pytest.raises(ConfigError) as caught:
        load_config(raw, {**ENV, "SHORT": "s" * 31, "LONG": "s" * 32})
    assert problem in str(caught.value)


def test_s5_introspection_failures_default_and_setting() -> None:
    raw = example()
    raw["brands"][0]["delegation"]["introspection"] = {"secret": "${LONG}"}
    delegation = load_config(raw, {**ENV, "LONG": "s" * 32}).brands["acme"].delegation
    assert delegation is not None
    assert delegation.introspection_failures == RateRule(rate=0.1, burst=10)
    raw["brands"][0]["delegation"]["introspection"]["failures"] = {"burst": 3, "enabled": False}
    delegation = load_config(raw, {**ENV, "LONG": "s" * 32}).brands["acme"].delegation
    assert delegation is not None
    assert delegation.introspection_failures == RateRule(rate=0.1, burst=3, enabled=False)


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
    assert config.listen.trusted_proxies == ()  # no forwarded address is believed by default
    assert config.listen.forwarded_header == "X-Forwarded-For"
    limits = config.rate_limits
    assert (
        limits.device_authorization.burst,
        limits.login_assertion.burst,
        limits.consent_decision.burst,
    ) == (
        5,
        20,
        20,
    )
    assert (
        limits.wrong_user_code_per_user.burst,
        limits.wrong_user_code_per_address.burst,
        limits.wrong_user_code_per_brand.burst,
    ) == (5, 10, 60)


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
        (
            ["brands", 0, "upstream", "url"],
            "ftp://bot",
            "brands[0].upstream.url",
            "an http:// or https:// URL",
        ),
        (["brands", 0, "id"], "bad id!", "brands[0].id", "letters, digits, '.', '_' or '-'"),
        (["brands", 0, "name"], KeyError, "brands[0].name", "is required"),
        (["brands", 0, "colour"], "blue", "brands[0].colour", "unknown setting"),
        (["provider", "audience"], 7, "provider.audience", "is not of type 'string'"),
        (["cache", "url"], "mongodb://x", "cache.url", "must start with memory://, redis://"),
        (["listen", "port"], 70000, "listen.port", "is greater than the maximum"),
        (["listen", "trusted_proxies"], ["10.0.0.0/8", "10.0.0.1/8"], "listen.trusted_proxies[1]", "CIDR"),
        (["listen", "trusted_proxies"], ["ingress"], "listen.trusted_proxies[0]", "CIDR"),
        (["listen", "forwarded_header"], "X-Real-IP", "listen.forwarded_header", "is not one of"),
        (["listen", "ipv6_prefix"], 47, "listen.ipv6_prefix", "less than the minimum of 48"),
        (["listen", "ipv6_prefix"], 65, "listen.ipv6_prefix", "greater than the maximum of 64"),
        (
            ["rate_limits", "wrong_user_code_per_user"],
            {"rate": 0},
            "rate_limits.wrong_user_code_per_user.rate",
            "less than or equal to the minimum",
        ),
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
        (
            ["personal_agents", "jwks", "open_fetch_rate"],
            0,
            "personal_agents.jwks.open_fetch_rate",
            "less than or equal to the minimum of 0",
        ),
        (
            ["personal_agents", "jwks", "open_fetch_burst"],
            0,
            "personal_agents.jwks.open_fetch_burst",
            "is less than the minimum of 1",
        ),
        (
            ["personal_agents", "jwks", "open_fetch_burst"],
            2.5,
            "personal_agents.jwks.open_fetch_burst",
            "is not of type 'integer'",
        ),
        ([*DELEGATION, "token_ttl"], 7200, "brands[0].delegation.token_ttl", "is greater than the maximum"),
        (
            [*DELEGATION, "refresh_grace"],
            -1,
            "brands[0].delegation.refresh_grace",
            "is less than the minimum",
        ),
        (
            [*DELEGATION, "refresh_grace"],
            61,
            "brands[0].delegation.refresh_grace",
            "is greater than the maximum",
        ),
        (
            [*DELEGATION, "refresh_grace"],
            "5s",
            "brands[0].delegation.refresh_grace",
            "is not of type 'integer'",
        ),
        ([*DELEGATION, "scopes"], {}, "brands[0].delegation.scopes", "should be non-empty"),
        ([*DELEGATION, "scopes", "bad scope"], "x", "brands[0].delegation.scopes", "key 'bad scope' must be"),
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


def test_every_missing_environment_variable_is_named_where_it_is_used() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(example(), {})
    assert [str(problem) for problem in caught.value.problems] == [
        "oauth.signing_keys[0].value: environment variable PACT_SIGNING_KEY is not set",
        "brands[0].upstream.headers.Authorization: environment variable ACME_BOT_TOKEN is not set",
    ]


def test_duplicates_are_rejected() -> None:
    raw = example()
    raw["brands"].append(copy.deepcopy(raw["brands"][0]))
    with pytest.raises(ConfigError, match=r"brands\[1\]\.id: duplicate brand id"):
        load_config(raw, ENV)
    raw = example()
    raw["personal_agents"]["registered"][1]["issuer"] = raw["personal_agents"]["registered"][0]["issuer"]
    with pytest.raises(ConfigError, match=r"registered\[1\]\.issuer: duplicate issuer"):
        load_config(raw, ENV)


def test_s5_3_a_registered_agent_name_is_checked_where_it_is_written() -> None:
    """Issue 18: the consent page's name for an agent is one printable line."""
    raw = example()
    raw["personal_agents"]["registered"][0]["name"] = "Jane's Helper"
    assert load_config(raw, ENV).personal_agents.registered[0].name == "Jane's Helper"
    for bad, why in (
        ("two\nlines", "must be printable text"),
        ("   ", "must be printable text"),
        ("", "personal_agents.registered[0].name"),
        ("x" * (MAX_AGENT_NAME + 1), "personal_agents.registered[0].name"),
    ):
        raw["personal_agents"]["registered"][0]["name"] = bad
        with pytest.raises(ConfigError) as caught:
            load_config(raw, ENV)
        assert str(caught.value.problems[0]).startswith("personal_agents.registered[0].name")
        assert why in str(caught.value.problems[0])


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
    with pytest.raises(ConfigError, match="cannot read the file: No such file or directory"):
        load_config_file(tmp_path / "missing.yaml", ENV)
    bad = tmp_path / "bad.yaml"
    bad.write_text("brands: [\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_config_file(bad, ENV)
    not_a_map = tmp_path / "list.yaml"
    not_a_map.write_text("- 1\n")
    with pytest.raises(ConfigError, match=r"\(top level\): must be a mapping of settings"):
        load_config_file(not_a_map, ENV)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "the file is empty"),
        ("\n  \n", "the file is empty"),
        ("# public_url: https://gw.example\n", "the file holds only comments"),
        (
            "provider:\n\torganization: P\n",
            "not valid YAML at line 2, column 1: found character '\\t' that cannot start any token"
            " (while scanning for the next token); YAML indents with spaces, never tabs",
        ),
        (
            'public_url: "https://gw.example\nbrands: []\n',
            "not valid YAML at line 3, column 1: found unexpected end of stream"
            " (while scanning a quoted scalar from line 1, column 13)",
        ),
        ("brands: [\n", "not valid YAML at line 2, column 1: expected the node content"),
    ],
    ids=["empty", "blank", "comments", "tab", "unclosed-quote", "unclosed-bracket"],
)
def test_a_file_that_is_no_configuration_says_why(tmp_path: Path, text: str, reason: str) -> None:
    """Empty, or a YAML syntax error: PyYAML's own cause with its line and column, nothing else."""
    path = tmp_path / "gw.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        check_config_file(path, ENV)
    assert len(caught.value.problems) == 1
    assert caught.value.path == ""
    assert caught.value.reason.startswith(reason)


def test_every_problem_is_reported_in_one_run_with_its_yaml_path(tmp_path: Path) -> None:
    """Schema and semantic problems in different parts of one file, listed top to bottom; each
    ``ConfigError`` keeps the first as its ``path`` and ``reason``."""
    raw = example()
    raw["public_url"] = "gw.example"
    raw["personal_agents"]["registered"][0]["jwks_uri"] = "http://pa.example.com/jwks"
    raw["cache"]["closed_ttl"] = 10
    raw["brands"][0]["upstream"]["timout"] = 3
    raw["brands"][0]["delegation"]["login"]["url"] = "http://login.acme.example/pact"
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(ConfigError) as caught:
        load_config_file(path, ENV)
    assert [str(problem) for problem in caught.value.problems] == [
        "public_url: must be an http:// or https:// URL",
        "personal_agents.registered[0].jwks_uri: must use https (plain http needs development: true)",
        "cache.closed_ttl: must be at least conversation_ttl",
        "brands[0].upstream.timout: unknown setting; did you mean timeout?",
        "brands[0].delegation.login.url: must use https (plain http needs development: true)",
    ]
    assert (caught.value.path, caught.value.reason) == ("public_url", "must be an http:// or https:// URL")
    assert str(caught.value).startswith("public_url: must be an http:// or https:// URL; personal_agents")


@pytest.mark.parametrize(
    ("path", "key", "problems"),
    [
        ([], "brnads", ["brnads: unknown setting; did you mean brands?"]),
        (["cache"], "retry_windw", ["cache.retry_windw: unknown setting; did you mean retry_window?"]),
        (
            ["brands", 0, "delegation", "login"],
            "jwks_url",
            ["brands[0].delegation.login.jwks_url: unknown setting; did you mean jwks_uri?"],
        ),
        (
            ["limits"],
            "colour",
            [
                "limits.colour: unknown setting; this block takes max_body_bytes, request_timeout,"
                " shutdown_timeout, max_bot_calls, bot_answer_line_bytes, bot_answer_head_bytes,"
                " bot_answer_fields"
            ],
        ),
    ],
)
def test_an_unknown_key_at_any_level_says_what_it_likely_meant(
    path: list[str | int], key: str, problems: list[str]
) -> None:
    """A misspelt required key is one mistake: ``brnads:`` is not also "brands: is required"."""
    raw = example()
    node: Any = raw
    for part in path:
        node = node[part]
    original = key.replace("brnads", "brands").replace("jwks_url", "jwks_uri")
    node[key] = node.pop(original) if original in node else 1
    with pytest.raises(ConfigError) as caught:
        load_config(raw, ENV)
    assert [str(problem) for problem in caught.value.problems] == problems


def _patterns(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        found = {schema["pattern"]} if isinstance(schema.get("pattern"), str) else set()
        return found.union(*(_patterns(value) for value in schema.values()))
    if isinstance(schema, list):
        return set().union(*(_patterns(value) for value in schema))
    return set()


def test_every_pattern_rule_is_worded_for_an_operator() -> None:
    assert _patterns(SCHEMA) <= set(_PATTERN_RULES)
    raw = example()
    raw["brands"][0]["upstream"]["url"] = "bot.example/chat"
    raw["brands"][0]["domain"] = "https://acme.example"
    with pytest.raises(ConfigError) as caught:
        load_config(raw, ENV)
    assert [str(problem) for problem in caught.value.problems] == [
        "brands[0].domain: must be a bare host name: letters, digits, '.' and '-' (no scheme, port or path)",
        "brands[0].upstream.url: must be an http:// or https:// URL",
    ]


def test_check_config_notes_unset_variables_that_serve_refuses(tmp_path: Path) -> None:
    """``check-config`` runs where the secrets are not: an unset ``${NAME}`` is a note, and the
    signing key behind one is not parsed; ``serve``'s loader refuses the same file for both."""
    raw = example()
    raw["cache"]["url"] = "rediss://:${REDIS_PASSWORD}@redis:6380/0"
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    checked = check_config_file(path, {})
    assert checked.unset == ("ACME_BOT_TOKEN", "PACT_SIGNING_KEY", "REDIS_PASSWORD")
    assert checked.config.oauth.signing_keys == ()
    assert checked.config.cache.backend == "redis"
    assert check_config_file(path, {**ENV, "REDIS_PASSWORD": "pw"}).unset == ()
    with pytest.raises(ConfigError) as refused:
        load_config_file(path, {})
    assert [problem.path for problem in refused.value.problems] == [
        "cache.url",
        "oauth.signing_keys[0].value",
        "brands[0].upstream.headers.Authorization",
    ]
    raw["oauth"]["signing_keys"] = [{"value": "not a key"}]
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(ConfigError, match=r"oauth\.signing_keys\[0\]\.value: .*PEM private key"):
        check_config_file(path, {})


HTTP_MAPPING: dict[str, Any] = {
    "body": {"q": "{{text}}", "who": ["{{pa_issuer}}", "key ${BOT_BODY_KEY}"]},
    "reply": {"text": "answer.text"},
}


def _upstream(adapter: str | None = None, **blocks: Any) -> dict[str, Any]:
    raw = example()
    upstream = raw["brands"][0]["upstream"]
    if adapter is not None:
        upstream["adapter"] = adapter
    upstream.update(blocks)
    return raw


def test_adapter_defaults_to_pact_and_takes_its_own_block() -> None:
    plain = load_config(example(), ENV).brands["acme"].upstream
    assert (plain.adapter, plain.rasa, plain.http) == ("pact", None, None)
    rasa = load_config(_upstream("rasa"), ENV).brands["acme"].upstream
    assert rasa.rasa is not None
    assert (rasa.rasa.metadata, rasa.rasa.no_answer) == (False, "Sorry, I have no answer to that.")
    tuned = load_config(_upstream("rasa", rasa={"metadata": True, "no_answer": "?"}), ENV).brands["acme"]
    assert tuned.upstream.rasa is not None
    assert (tuned.upstream.rasa.metadata, tuned.upstream.rasa.no_answer) == (True, "?")
    mapped = load_config(_upstream("http", http=HTTP_MAPPING), {**ENV, "BOT_BODY_KEY": "b-1"}).brands["acme"]
    assert mapped.upstream.http is not None
    assert mapped.upstream.http.body == {"q": "{{text}}", "who": ["{{pa_issuer}}", "key b-1"]}
    assert (mapped.upstream.http.method, mapped.upstream.http.reply.text) == ("POST", "answer.text")


@pytest.mark.parametrize(
    ("adapter", "blocks", "where", "why"),
    [
        ("kafka", {}, "brands[0].upstream.adapter", "is not one of"),
        (
            None,
            {"rasa": {}},
            "brands[0].upstream.rasa",
            "the rasa adapter's settings, but upstream.adapter is pact",
        ),
        ("rasa", {"http": HTTP_MAPPING}, "brands[0].upstream.http", "but upstream.adapter is rasa"),
        ("rasa", {"rasa": {"colour": "blue"}}, "brands[0].upstream.rasa.colour", "unknown setting"),
        ("rasa", {"rasa": {"no_answer": ""}}, "brands[0].upstream.rasa.no_answer", "should be non-empty"),
        ("http", {}, "brands[0].upstream.http", "is required by adapter http"),
        ("http", {"http": {"body": {}}}, "brands[0].upstream.http.reply", "is required"),
        (
            "http",
            {"http": {**HTTP_MAPPING, "method": "GET"}},
            "brands[0].upstream.http.method",
            "is not one of",
        ),
        (
            "http",
            {"http": {**HTTP_MAPPING, "body": {"a": [1, "{{text}} {{password}}"]}}},
            "brands[0].upstream.http.body.a[1]",
            "unknown placeholder {{password}}",
        ),
        (
            "http",
            {"http": {**HTTP_MAPPING, "reply": {"text": "a", "texts": "b"}}},
            "brands[0].upstream.http.reply.text",
            "exactly one of text and texts",
        ),
        (
            "http",
            {"http": {**HTTP_MAPPING, "reply": {"end": "done"}}},
            "brands[0].upstream.http.reply.text",
            "exactly one of text and texts",
        ),
        (
            "http",
            {"http": {**HTTP_MAPPING, "reply": {"text": "a", "end": "result.[oops"}}},
            "brands[0].upstream.http.reply.end",
            "is not a JMESPath expression",
        ),
        ("http", {"http": HTTP_MAPPING}, "brands[0].upstream.http.body.who[1]", "BOT_BODY_KEY is not set"),
        (
            "http",
            {"http": {**HTTP_MAPPING, "probe_url": "ftp://x"}},
            "brands[0].upstream.http.probe_url",
            "must be an http:// or https:// URL",
        ),
        # The bot client sends no credentials from a URL (aiohttp's did, as Basic auth).
        (
            None,
            {"url": "https://bot:s3cret@bot.example/chat"},
            "brands[0].upstream.url",
            "must not carry credentials",
        ),
        (
            "http",
            {"http": {**HTTP_MAPPING, "body": {}, "probe_url": "https://bot:s3cret@bot.example/health"}},
            "brands[0].upstream.http.probe_url",
            "must not carry credentials",
        ),
        (None, {"url": "http:///chat"}, "brands[0].upstream.url", "must name a host"),
    ],
)
def test_bad_adapter_settings_name_their_yaml_path(
    adapter: str | None, blocks: dict[str, Any], where: str, why: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_upstream(adapter, **copy.deepcopy(blocks)), ENV)
    assert caught.value.path == where
    assert why in caught.value.reason


class _AnyEnvironment(dict[str, str]):
    """Every ``${NAME}`` is set (to ``set-NAME``): the commented examples name their own secrets."""

    def __contains__(self, name: object) -> bool:
        return True

    def __missing__(self, name: str) -> str:
        return f"set-{name}"


def test_commented_brand_examples_load_once_uncommented() -> None:
    """Each commented-out Brand in config/example.yaml (``  # - id: ...`` and its ``  #   `` lines)
    is a valid Brand: uncommented into the file, it loads with its adapter's settings."""
    text = (ROOT / "config" / "example.yaml").read_text()
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("  # - id:"):
            current = [line]
            blocks.append(current)
        elif current is not None and line.startswith("  #   "):
            current.append(line)
        else:
            current = None
    assert len(blocks) >= 2
    raw = example()
    for block in blocks:
        raw["brands"].extend(yaml.safe_load("\n".join(line[4:] for line in block)))
    config = load_config(raw, _AnyEnvironment(ENV))
    adapters = {brand.upstream.adapter for brand in config.brands.values()}
    assert {"rasa", "http", "openai", "directline"} <= adapters


def test_secrets_stay_out_of_the_configurations_repr() -> None:
    """A traceback or a failed assertion prints a configuration: no bot credential, no Redis password."""
    raw = example()
    raw["cache"]["url"] = "redis://:redis-s3cret@redis.internal:6379/0"
    config = load_config(raw, ENV)
    assert config.brands["acme"].upstream.headers["Authorization"] == "Bearer secret-token"
    printed = repr(config)
    assert "secret-token" not in printed
    assert "redis-s3cret" not in printed


def test_admin_api_is_off_by_default_and_its_token_is_read_only_when_on(tmp_path: Path) -> None:
    assert load_config(example(), ENV).admin.enabled is False  # ${PACT_ADMIN_TOKEN} named, not set
    raw = example()
    raw["admin"] = {"enabled": True, "token": "${PACT_ADMIN_TOKEN}"}
    token = "t" * 32
    config = load_config(raw, {**ENV, "PACT_ADMIN_TOKEN": token})
    assert (config.admin.enabled, config.admin.token) == (True, token)
    assert token not in repr(config)
    with pytest.raises(ConfigError, match="PACT_ADMIN_TOKEN is not set"):
        load_config(raw, ENV)
    (tmp_path / "gw.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    checked = check_config_file(tmp_path / "gw.yaml", ENV)
    assert checked.unset == ("PACT_ADMIN_TOKEN",)


@pytest.mark.parametrize(
    ("admin", "metrics", "problem"),
    [
        ({"enabled": True}, True, "admin.token: is required when admin.enabled is true"),
        ({"enabled": False, "token": "s3cret-in-the-file"}, True, "admin.token: must be an environment"),
        (
            {"enabled": True, "token": "${PACT_ADMIN_TOKEN}", "port": 8080},
            True,
            "admin.port: is listen.port on",
        ),
        (
            {"enabled": True, "token": "${PACT_ADMIN_TOKEN}", "port": 9090},
            True,
            "admin.port: is metrics.port on",
        ),
        (
            {"enabled": True, "token": "${PACT_ADMIN_TOKEN}", "port": 70000},
            True,
            "admin.port: 70000 is greater",
        ),
        (
            {"enabled": True, "token": "${PACT_ADMIN_TOKEN}", "port": "9091"},
            True,
            "admin.port: '9091' is not of",
        ),
        ({"enabled": True, "token": "${PACT_ADMIN_TOKEN}", "host": 1}, True, "admin.host: 1 is not of type"),
        ({"enabled": True, "token": "${SHORT_TOKEN}"}, True, "admin.token: must be at least 32 characters"),
        ({"enabled": "yes"}, True, "admin.enabled: 'yes' is not of type 'boolean'"),
        ({"enable": True}, True, "admin.enable: unknown setting; did you mean enabled?"),
    ],
)
def test_admin_api_settings_are_checked(admin: dict[str, Any], metrics: bool, problem: str) -> None:
    raw = example()
    raw["admin"] = admin
    raw["metrics"]["enabled"] = metrics
    with pytest.raises(ConfigError) as caught:
        load_config(raw, {**ENV, "PACT_ADMIN_TOKEN": "t" * 64, "SHORT_TOKEN": "t" * 31})
    assert str(caught.value).startswith(problem)


def test_i10_admin_api_has_its_own_loopback_listener_which_needs_no_ops_listener() -> None:
    """Issue 18 row I10: ``admin.host`` defaults to loopback, ``admin.port`` to 9091; a port shared with
    another listener is refused only where the two can meet (same host, or either on every interface)."""
    raw = example()
    raw["admin"] = {"enabled": True, "token": "${PACT_ADMIN_TOKEN}"}
    raw["metrics"]["enabled"] = False
    environ = {**ENV, "PACT_ADMIN_TOKEN": "t" * 32}
    admin = load_config(raw, environ).admin
    assert (admin.enabled, admin.host, admin.port) == (True, "127.0.0.1", 9091)
    raw["metrics"] = {"enabled": True, "host": "10.0.0.5", "port": 9300}
    raw["admin"].update(host="127.0.0.1", port=9300)
    assert load_config(raw, environ).admin.port == 9300  # other address: no clash
    raw["metrics"]["host"] = "0.0.0.0"  # noqa: S104 - a setting, never bound
    with pytest.raises(
        ConfigError, match=r"^admin.port: is metrics.port on the same address \(0.0.0.0:9300\)"
    ):
        load_config(raw, environ)
    raw["metrics"]["enabled"] = False
    assert load_config(raw, environ).admin.port == 9300  # no ops listener to clash with


def test_i5_the_port_clash_check_resolves_host_names() -> None:
    """Issue 28 I5: ``admin.host: localhost`` on the port of a listener on ``127.0.0.1`` passed
    ``check-config`` as two hosts; the check compares the addresses the names bind."""
    raw = example()
    raw["listen"] = {"host": "127.0.0.1", "port": 8080}
    raw["metrics"]["enabled"] = False
    raw["admin"] = {"enabled": True, "token": "${PACT_ADMIN_TOKEN}", "host": "localhost", "port": 8080}
    environ = {**ENV, "PACT_ADMIN_TOKEN": "t" * 32}
    with pytest.raises(
        ConfigError, match=r"^admin.port: is listen.port on the same address \(127.0.0.1:8080\)"
    ):
        load_config(raw, environ)
    with pytest.raises(ConfigError, match=r"^admin.port: is listen.port"):
        check_config(raw, {})
    raw["listen"]["host"], raw["admin"]["host"] = "0:0::0:1", "::1"  # one address, written twice
    with pytest.raises(ConfigError, match=r"^admin.port: is listen.port"):
        load_config(raw, environ)
    raw["admin"]["host"] = "127.0.0.1"  # another address: no clash
    assert load_config(raw, environ).admin.port == 8080


@pytest.mark.parametrize(
    ("host", "warned"),
    [
        ("0.0.0.0", True),  # noqa: S104 - a setting, never bound
        ("::", True),
        ("10.0.0.5", True),
        ("127.0.0.1", False),
        ("::1", False),
        ("localhost", False),
    ],
)
def test_i5_a_non_loopback_admin_host_is_warned_of(host: str, warned: bool) -> None:
    """Issue 28 I5: ``admin.host: 0.0.0.0`` passed without a note; the admin API lists and erases any
    person's conversations, and off loopback its token alone guards it."""
    raw = example()
    raw["admin"] = {"enabled": True, "token": "${PACT_ADMIN_TOKEN}", "host": host}
    warnings = check_config(raw, {}).warnings
    assert bool(warnings) is warned
    if warned:
        assert warnings[0].startswith(f"admin.host: {host} is not a loopback address")
        assert config_warnings(load_config(raw, {**ENV, "PACT_ADMIN_TOKEN": "t" * 32})) == warnings
    raw["admin"]["enabled"] = False  # no listener, nothing to say
    assert check_config(raw, {}).warnings == ()


NOT_A_TOKEN = "is not a valid header name (RFC 9110 §5.1: a token, no spaces)"
NOT_ONE_LINE = "contains a control character (CR, LF, NUL...); a header value is one line"


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("Authorization", "Bearer a\r\nX-Injected: 1", NOT_ONE_LINE),
        ("Authorization", "${ACME_BOT_TOKEN}", NOT_ONE_LINE),
        ("X Api Key", "k", NOT_A_TOKEN),
        ("X-Key:", "k", NOT_A_TOKEN),
    ],
)
def test_upstream_headers_are_one_line_fields_refused_at_load(name: str, value: str, why: str) -> None:
    """Issue 18 I7: a header name with a space or a value with CR/LF (literal, or from the environment) is
    refused at load with its YAML path (RFC 9110 §5.1, §5.5), not on every turn; the message never quotes
    the value, which is a credential."""
    raw = example()
    raw["brands"][0]["upstream"]["headers"] = {name: value}
    with pytest.raises(ConfigError) as refused:
        load_config(raw, {**ENV, "ACME_BOT_TOKEN": "secret\nX-Injected: 1"})
    assert [str(problem) for problem in refused.value.problems] == [
        f"brands[0].upstream.headers.{name}: {why}"
    ]
    assert "Injected" not in str(refused.value)


@pytest.mark.parametrize(
    "name",
    [
        "Host",
        "content-length",
        "Transfer-Encoding",
        "Connection",
        "Keep-Alive",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Upgrade",
    ],
)
def test_upstream_headers_naming_a_framing_or_hop_by_hop_field_are_refused_at_load(name: str) -> None:
    """Issue 28 I3: a Brand's ``Host``, ``Content-Length`` or ``Transfer-Encoding`` would go out beside the
    client's own (two framings: request smuggling toward a proxy in front of the bot, RFC 9112 §6.3), and
    the RFC 9110 §7.6.1 hop-by-hop fields steer the client's connection: refused with the YAML path."""
    raw = example()
    raw["brands"][0]["upstream"]["headers"] = {name: "1"}
    with pytest.raises(ConfigError) as refused:
        load_config(raw, ENV)
    assert [str(problem) for problem in refused.value.problems] == [
        f"brands[0].upstream.headers.{name}: is a framing or hop-by-hop field, the bot client's own "
        "(RFC 9112 §6, RFC 9110 §7.6.1)"
    ]


def test_upstream_header_with_a_tab_and_dots_in_its_name_loads() -> None:
    raw = example()
    raw["brands"][0]["upstream"]["headers"] = {"X.Key_1": "a\tb c"}
    assert load_config(raw, ENV).brands["acme"].upstream.headers == {"X.Key_1": "a\tb c"}


def test_a_stream_is_the_config_or_the_chart_configmap_carrying_it() -> None:
    """``check-config -`` (issue 19 row 14): the gateway YAML, or ``helm template`` output."""
    assert config_document_from_stream("public_url: https://x.example\n") == {
        "public_url": "https://x.example"
    }
    configmap = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: pg}\ndata:\n  config.yaml: |\n"
    carried = configmap + "    public_url: https://x.example\n"
    service = "apiVersion: v1\nkind: Service\nmetadata: {name: pg-pact-gateway}\n"
    assert config_document_from_stream(f"{service}---\n{carried}") == {"public_url": "https://x.example"}
    with pytest.raises(ConfigError, match="2 ConfigMaps with data"):
        config_document_from_stream(f"{carried}---\n{carried}")
    with pytest.raises(ConfigError, match="holds 2 YAML documents; a config is one"):
        config_document_from_stream("a: 1\n---\nb: 2\n")
    with pytest.raises(ConfigError, match="the input holds only comments"):
        config_document_from_stream("# nothing\n")
    with pytest.raises(ConfigError, match="not valid YAML at line 2"):
        config_document_from_stream("a: [\n")


@pytest.mark.parametrize(
    ("limits", "problem"),
    [
        ({"bot_answer_line_bytes": 100}, "limits.bot_answer_line_bytes: 100 is less than the minimum of 256"),
        ({"bot_answer_fields": 2}, "limits.bot_answer_fields: 2 is less than the minimum of 8"),
        (
            {"bot_answer_line_bytes": 16384, "bot_answer_head_bytes": 8192},
            "limits.bot_answer_head_bytes: must be at least bot_answer_line_bytes",
        ),
    ],
)
def test_the_bot_answer_bounds_are_validated_with_their_path(limits: dict[str, int], problem: str) -> None:
    """A bound below what any answer needs, or a head shorter than one of its lines, is refused."""
    raw = example()
    raw["limits"] = limits
    with pytest.raises(ConfigError) as caught:
        load_config(raw, ENV)
    assert problem in str(caught.value)
