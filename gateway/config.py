"""Typed gateway configuration, loaded and validated once at start-up.

The YAML is checked in two passes: a JSON Schema for shape and types (so every error
names the YAML path of the bad value), then the semantic rules a schema cannot say
(HTTPS-only JWKS outside development, unique ids, environment variables present).
Only then is it turned into frozen dataclasses, so the rest of the gateway never sees
an unchecked value.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import jsonschema
import yaml

from gateway.oauth.keys import SigningKey, parse_signing_key

__all__ = [
    "BrandConfig",
    "CacheConfig",
    "CircuitBreakerConfig",
    "ConfigError",
    "DelegationConfig",
    "GatewayConfig",
    "JwksPolicy",
    "LimitsConfig",
    "ListenConfig",
    "LoggingConfig",
    "LoginConfig",
    "MetricsConfig",
    "OAuthConfig",
    "PersonalAgentConfig",
    "PersonalAgentsConfig",
    "ProviderConfig",
    "RateLimitsConfig",
    "RateRule",
    "ReloadConfig",
    "SkillConfig",
    "TracingConfig",
    "UpstreamConfig",
    "load_config",
    "load_config_file",
]

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_BRAND_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class ConfigError(ValueError):
    """A configuration file that cannot be served; ``path`` is the YAML path of the bad value."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ListenConfig:
    host: str = "0.0.0.0"  # noqa: S104 - a gateway in a container listens on every interface
    port: int = 8080


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    organization: str
    url: str
    audience: str


@dataclass(frozen=True, slots=True)
class PersonalAgentConfig:
    issuer: str
    jwks_uri: str | None
    enabled: bool = True
    jwks: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class JwksPolicy:
    """Bounds on how the gateway fetches and caches personal agents' key sets (§3.2)."""

    min_ttl: float = 60.0
    max_ttl: float = 86400.0
    default_ttl: float = 300.0
    refetch_cooldown: float = 15.0
    timeout: float = 5.0
    max_bytes: int = 65536
    # Under the open policy anyone can be an issuer: this bounds the memory their keys and
    # discovery documents take. The least recently used is dropped first; inline keys never are.
    max_cached_issuers: int = 4096


@dataclass(frozen=True, slots=True)
class PersonalAgentsConfig:
    policy: Literal["allowlist", "open"] = "allowlist"
    registered: tuple[PersonalAgentConfig, ...] = ()
    jwks: JwksPolicy = field(default_factory=JwksPolicy)

    def find(self, issuer: str) -> PersonalAgentConfig | None:
        for agent in self.registered:
            if agent.issuer == issuer:
                return agent
        return None


@dataclass(frozen=True, slots=True)
class CacheConfig:
    url: str = "memory://"
    conversation_ttl: int = 86400
    closed_ttl: int = 7 * 86400
    retry_window: int = 300
    pending_ttl: int = 60
    timeout: float = 2.0  # seconds a Redis command or connection attempt may take

    @property
    def backend(self) -> Literal["memory", "redis"]:
        return "memory" if urlsplit(self.url).scheme == "memory" else "redis"


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_body_bytes: int = 65536
    request_timeout: float = 30.0
    shutdown_timeout: float = 20.0  # seconds in-flight requests get to finish after SIGTERM


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """The operations listener: Prometheus ``/metrics``, ``/healthz`` and ``/readyz``."""

    enabled: bool = True
    host: str = "0.0.0.0"  # noqa: S104 - scraped from outside the pod
    port: int = 9090


@dataclass(frozen=True, slots=True)
class ReloadConfig:
    """Re-reading the file on a change, besides on ``SIGHUP``: ``interval`` seconds between looks."""

    watch: bool = False
    interval: float = 2.0


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["json", "text"] = "json"
    access_log: bool = True


@dataclass(frozen=True, slots=True)
class TracingConfig:
    """OpenTelemetry export of the gateway's spans over OTLP/HTTP; off unless ``otlp_endpoint`` is set.

    ``traceparent`` is accepted, passed on to the bots and logged either way; this only decides
    whether spans are recorded and sent (``sample_ratio`` of new traces; a caller's sampled flag
    is followed).
    """

    otlp_endpoint: str | None = None
    service_name: str = "pact-gateway"
    sample_ratio: float = 1.0


@dataclass(frozen=True, slots=True)
class SkillConfig:
    id: str
    name: str
    description: str
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RateRule:
    """One §6 rate limit: ``rate`` requests per second sustained, ``burst`` at once from idle."""

    rate: float
    burst: int
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class RateLimitsConfig:
    """§6 rate limits per personal agent and per (personal agent, sub), counted in the shared store.

    ``fail_open``: when the store cannot count, serve the request (a support bot that stays
    reachable beats a strict limit) instead of answering ``INTERNAL``.
    """

    per_agent: RateRule = field(default_factory=lambda: RateRule(rate=50.0, burst=100))
    per_user: RateRule = field(default_factory=lambda: RateRule(rate=2.0, burst=10))
    fail_open: bool = True


@dataclass(frozen=True, slots=True)
class CircuitBreakerConfig:
    """Open after ``failures`` consecutive failed bot calls within ``window`` s; probe after ``cooldown``."""

    enabled: bool = True
    failures: int = 5
    window: float = 30.0
    cooldown: float = 15.0


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    url: str
    timeout: float = 10.0
    headers: Mapping[str, str] = field(default_factory=dict)
    max_concurrency: int = 64
    queue_timeout: float = 1.0
    circuit_breaker: CircuitBreakerConfig = field(default_factory=CircuitBreakerConfig)


@dataclass(frozen=True, slots=True)
class LoginConfig:
    """§5.3 the Brand's own login: where the User signs in, and who signs the assertion it posts back."""

    url: str
    issuer: str
    jwks_uri: str | None = None
    jwks: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class DelegationConfig:
    """§5 for one Brand: its scopes (id → description, in card order), its login, and lifetimes."""

    scopes: Mapping[str, str]
    login: LoginConfig
    token_ttl: int = 3600
    grant_ttl: int = 30 * 86400
    landing_url: str | None = None
    skip_consent: bool = True
    introspection_secret: str | None = field(default=None, repr=False)
    """RFC 7662: the Brand back-end's bearer credential for introspection; ``None`` turns it off."""


@dataclass(frozen=True, slots=True)
class OAuthConfig:
    """The Provider's signing keys for delegation tokens and receipts: the first signs, all are published."""

    signing_keys: tuple[SigningKey, ...] = ()


@dataclass(frozen=True, slots=True)
class BrandConfig:
    id: str
    name: str
    description: str
    version: str
    upstream: UpstreamConfig
    skills: tuple[SkillConfig, ...] = ()
    domain: str | None = None
    # The effective limits for this Brand: the top-level ones with the Brand's overrides applied.
    rate_limits: RateLimitsConfig = field(default_factory=RateLimitsConfig)
    delegation: DelegationConfig | None = None


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    public_url: str
    provider: ProviderConfig
    brands: Mapping[str, BrandConfig]
    listen: ListenConfig = field(default_factory=ListenConfig)
    development: bool = False
    security_scheme_name: str = "paJwt"
    personal_agents: PersonalAgentsConfig = field(default_factory=PersonalAgentsConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    rate_limits: RateLimitsConfig = field(default_factory=RateLimitsConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    reload: ReloadConfig = field(default_factory=ReloadConfig)
    oauth: OAuthConfig = field(default_factory=OAuthConfig)
    tracing: TracingConfig = field(default_factory=TracingConfig)

    def brand_for_domain(self, host: str) -> BrandConfig | None:
        name = host.rsplit(":", 1)[0].lower() if not host.startswith("[") else host
        for brand in self.brands.values():
            if brand.domain is not None and brand.domain.lower() == name:
                return brand
        return None


def _obj(properties: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_STR = {"type": "string", "minLength": 1}
_POS_NUM = {"type": "number", "exclusiveMinimum": 0}
_POS_INT = {"type": "integer", "minimum": 1}
_RATE_RULE = _obj({"enabled": {"type": "boolean"}, "rate": _POS_NUM, "burst": _POS_INT})
_RATE_LIMITS = _obj({"per_agent": _RATE_RULE, "per_user": _RATE_RULE, "fail_open": {"type": "boolean"}})
_JWKS_OBJECT = {
    "type": "object",
    "required": ["keys"],
    "properties": {"keys": {"type": "array", "items": {"type": "object"}}},
}
# RFC 6749 §3.3 scope-token: printable ASCII but space, '"' and '\\'.
_SCOPE_ID = r"^[\x21\x23-\x5B\x5D-\x7E]{1,128}$"
_DELEGATION = _obj(
    {
        "scopes": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": _SCOPE_ID},
            "additionalProperties": _STR,
        },
        "login": _obj(
            {
                "url": {**_STR, "pattern": r"^https?://"},
                "issuer": _STR,
                "jwks_uri": _STR,
                "jwks": _JWKS_OBJECT,
            },
            ["url", "issuer"],
        ),
        "token_ttl": {"type": "integer", "minimum": 60, "maximum": 3600},
        "grant_ttl": {"type": "integer", "minimum": 60},
        "landing_url": {**_STR, "pattern": r"^https?://"},
        "skip_consent": {"type": "boolean"},
        "introspection": _obj({"secret": _STR}, ["secret"]),
    },
    ["scopes", "login"],
)
_SIGNING_KEY = {
    "type": "object",
    "properties": {"file": _STR, "value": _STR},
    "additionalProperties": False,
}

SCHEMA: dict[str, Any] = _obj(
    {
        "listen": _obj({"host": _STR, "port": {"type": "integer", "minimum": 0, "maximum": 65535}}),
        "public_url": {**_STR, "pattern": r"^https?://"},
        "development": {"type": "boolean"},
        "security_scheme_name": {**_STR, "pattern": r"^[A-Za-z][A-Za-z0-9_-]*$"},
        "provider": _obj(
            {"organization": _STR, "url": {**_STR, "pattern": r"^https?://"}, "audience": _STR},
            ["organization", "url", "audience"],
        ),
        "personal_agents": _obj(
            {
                "policy": {"enum": ["allowlist", "open"]},
                "registered": {
                    "type": "array",
                    "items": _obj(
                        {
                            "issuer": _STR,
                            "jwks_uri": _STR,
                            "enabled": {"type": "boolean"},
                            "jwks": _JWKS_OBJECT,
                        },
                        ["issuer"],
                    ),
                },
                "jwks": _obj(
                    {
                        "min_ttl": _POS_NUM,
                        "max_ttl": _POS_NUM,
                        "default_ttl": _POS_NUM,
                        "refetch_cooldown": {"type": "number", "minimum": 0},
                        "timeout": _POS_NUM,
                        "max_bytes": _POS_INT,
                        "max_cached_issuers": _POS_INT,
                    }
                ),
            }
        ),
        "cache": _obj(
            {
                "url": {**_STR, "pattern": r"^(memory|redis|rediss)://"},
                "conversation_ttl": _POS_INT,
                "closed_ttl": _POS_INT,
                "retry_window": _POS_INT,
                "pending_ttl": _POS_INT,
                "timeout": _POS_NUM,
            }
        ),
        "limits": _obj(
            {"max_body_bytes": _POS_INT, "request_timeout": _POS_NUM, "shutdown_timeout": _POS_NUM}
        ),
        "rate_limits": _RATE_LIMITS,
        "metrics": _obj(
            {
                "enabled": {"type": "boolean"},
                "host": _STR,
                "port": {"type": "integer", "minimum": 0, "maximum": 65535},
            }
        ),
        "logging": _obj(
            {
                "level": {"enum": ["DEBUG", "INFO", "WARNING", "ERROR"]},
                "format": {"enum": ["json", "text"]},
                "access_log": {"type": "boolean"},
            }
        ),
        "reload": _obj({"watch": {"type": "boolean"}, "interval": _POS_NUM}),
        "tracing": _obj(
            {
                "otlp_endpoint": {**_STR, "pattern": r"^https?://"},
                "service_name": _STR,
                "sample_ratio": {"type": "number", "minimum": 0, "maximum": 1},
            }
        ),
        "oauth": _obj({"signing_keys": {"type": "array", "minItems": 1, "items": _SIGNING_KEY}}),
        "brands": {
            "type": "array",
            "minItems": 1,
            "items": _obj(
                {
                    "id": {"type": "string", "pattern": _BRAND_ID},
                    "name": _STR,
                    "description": _STR,
                    "version": _STR,
                    "domain": {**_STR, "pattern": r"^[A-Za-z0-9.-]+$"},
                    "skills": {
                        "type": "array",
                        "items": _obj(
                            {
                                "id": _STR,
                                "name": _STR,
                                "description": _STR,
                                "tags": {"type": "array", "items": _STR},
                            },
                            ["id", "name", "description"],
                        ),
                    },
                    "rate_limits": _RATE_LIMITS,
                    "delegation": _DELEGATION,
                    "upstream": _obj(
                        {
                            "url": {**_STR, "pattern": r"^https?://"},
                            "timeout": _POS_NUM,
                            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                            "max_concurrency": _POS_INT,
                            "queue_timeout": {"type": "number", "minimum": 0},
                            "circuit_breaker": _obj(
                                {
                                    "enabled": {"type": "boolean"},
                                    "failures": _POS_INT,
                                    "window": _POS_NUM,
                                    "cooldown": _POS_NUM,
                                }
                            ),
                        },
                        ["url"],
                    ),
                },
                ["id", "name", "description", "version", "upstream"],
            ),
        },
    },
    ["public_url", "provider", "brands"],
)


def _yaml_path(parts: Sequence[str | int]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _check_schema(raw: Any) -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    errors = sorted(validator.iter_errors(raw), key=lambda e: (len(e.absolute_path), list(map(str, e.path))))
    if not errors:
        return
    error = errors[0]
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        raise ConfigError(_yaml_path([*path, extra[0]]) if extra else _yaml_path(path), "unknown setting")
    if error.validator == "required":
        missing = re.findall(r"'([^']+)' is a required property", error.message)
        name = missing[0] if missing else "?"
        raise ConfigError(_yaml_path([*path, name]), "is required")
    raise ConfigError(_yaml_path(path), error.message)


def _expand_env(value: str, path: str, environ: Mapping[str, str]) -> str:
    def repl(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ConfigError(path, f"environment variable {name} is not set")
        return environ[name]

    return _ENV_REF.sub(repl, value)


def _is_local_host(host: str) -> bool:
    if host in {"localhost", "localhost.localdomain"} or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local or address.is_unspecified


def _check_fetch_url(url: str, path: str, development: bool) -> None:
    """§3.1: ``jwksUri`` is HTTPS; plain HTTP and local targets only under ``development``."""
    parts = urlsplit(url)
    if parts.scheme not in {"https", "http"} or not parts.hostname:
        raise ConfigError(path, "must be an absolute https:// URL")
    if development:
        return
    if parts.scheme != "https":
        raise ConfigError(path, "must use https (plain http needs development: true)")
    if _is_local_host(parts.hostname):
        raise ConfigError(path, "must not point at a loopback or private address (needs development: true)")


def _check_browser_url(url: str, path: str, development: bool) -> None:
    """A page the User's browser opens (the Brand's login, the landing page): HTTPS outside development."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ConfigError(path, "must be an absolute URL")
    if parts.scheme != "https" and not development:
        raise ConfigError(path, "must use https (plain http needs development: true)")


def _signing_keys(raw: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[SigningKey, ...]:
    """§5.1 the Provider's keys, each from a file or from the environment (``value: ${NAME}``)."""
    keys: list[SigningKey] = []
    kids: set[str] = set()
    for index, entry in enumerate(raw.get("signing_keys", [])):
        path = f"oauth.signing_keys[{index}]"
        if ("file" in entry) == ("value" in entry):
            raise ConfigError(path, "give exactly one of file and value")
        if "file" in entry:
            path += ".file"
            try:
                material = Path(entry["file"]).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(path, f"cannot read {entry['file']}: {exc.strerror}") from None
        else:
            path += ".value"
            material = _expand_env(entry["value"], path, environ)
        try:
            key = parse_signing_key(material)
        except ValueError as exc:
            raise ConfigError(path, str(exc)) from None
        if key.kid in kids:
            raise ConfigError(path, f"duplicate kid {key.kid!r}")
        kids.add(key.kid)
        keys.append(key)
    return tuple(keys)


def _delegation(
    raw: Mapping[str, Any] | None, path: str, development: bool, environ: Mapping[str, str]
) -> DelegationConfig | None:
    if raw is None:
        return None
    login = raw["login"]
    if ("jwks_uri" in login) == ("jwks" in login):
        raise ConfigError(f"{path}.login.jwks_uri", "give exactly one of jwks_uri and an inline jwks")
    _check_browser_url(login["url"], f"{path}.login.url", development)
    if "jwks_uri" in login:
        _check_fetch_url(login["jwks_uri"], f"{path}.login.jwks_uri", development)
    if "landing_url" in raw:
        _check_browser_url(raw["landing_url"], f"{path}.landing_url", development)
    secret = raw.get("introspection", {}).get("secret")
    return DelegationConfig(
        scopes=dict(raw["scopes"]),
        login=LoginConfig(
            url=login["url"], issuer=login["issuer"], jwks_uri=login.get("jwks_uri"), jwks=login.get("jwks")
        ),
        token_ttl=int(raw.get("token_ttl", 3600)),
        grant_ttl=int(raw.get("grant_ttl", 30 * 86400)),
        landing_url=raw.get("landing_url"),
        skip_consent=bool(raw.get("skip_consent", True)),
        introspection_secret=None
        if secret is None
        else _expand_env(secret, f"{path}.introspection.secret", environ),
    )


def _installed(*modules: str) -> bool:
    """Whether every one of ``modules`` can be imported, found without importing it."""
    try:
        return all(importlib.util.find_spec(module) is not None for module in modules)
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _tracing(raw: Mapping[str, Any], environ: Mapping[str, str]) -> TracingConfig:
    """OTLP export: the endpoint may name ``${ENV}`` variables, and needs the optional ``otel`` extra."""
    endpoint = raw.get("otlp_endpoint")
    exporter = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http")
    if endpoint is not None and not _installed(*exporter):
        raise ConfigError(
            "tracing.otlp_endpoint", "needs the OpenTelemetry packages: pip install 'pact-gateway[otel]'"
        )
    return TracingConfig(
        otlp_endpoint=None if endpoint is None else _expand_env(endpoint, "tracing.otlp_endpoint", environ),
        service_name=raw.get("service_name", "pact-gateway"),
        sample_ratio=float(raw.get("sample_ratio", 1.0)),
    )


def _rate_limits(top: Mapping[str, Any], brand: Mapping[str, Any]) -> RateLimitsConfig:
    """§6 limits: the defaults, then the top-level ``rate_limits``, then a Brand's, setting by setting."""
    defaults = RateLimitsConfig()

    def rule(name: str, default: RateRule) -> RateRule:
        merged = {**top.get(name, {}), **brand.get(name, {})}
        return RateRule(
            rate=float(merged.get("rate", default.rate)),
            burst=int(merged.get("burst", default.burst)),
            enabled=bool(merged.get("enabled", default.enabled)),
        )

    return RateLimitsConfig(
        per_agent=rule("per_agent", defaults.per_agent),
        per_user=rule("per_user", defaults.per_user),
        fail_open=bool(brand.get("fail_open", top.get("fail_open", defaults.fail_open))),
    )


def _build(raw: Mapping[str, Any], environ: Mapping[str, str]) -> GatewayConfig:
    development = bool(raw.get("development", False))
    agents_raw = raw.get("personal_agents", {})
    policy = agents_raw.get("policy", "allowlist")
    registered: list[PersonalAgentConfig] = []
    seen_issuers: set[str] = set()
    for index, agent in enumerate(agents_raw.get("registered", [])):
        path = f"personal_agents.registered[{index}]"
        if agent["issuer"] in seen_issuers:
            raise ConfigError(f"{path}.issuer", "duplicate issuer")
        seen_issuers.add(agent["issuer"])
        jwks_uri = agent.get("jwks_uri")
        if jwks_uri is None and "jwks" not in agent:
            raise ConfigError(f"{path}.jwks_uri", "is required unless an inline jwks is given")
        if jwks_uri is not None:
            _check_fetch_url(jwks_uri, f"{path}.jwks_uri", development)
        registered.append(
            PersonalAgentConfig(
                issuer=agent["issuer"],
                jwks_uri=jwks_uri,
                enabled=agent.get("enabled", True),
                jwks=agent.get("jwks"),
            )
        )
    if policy == "allowlist" and not registered:
        raise ConfigError(
            "personal_agents.registered", "the allowlist policy needs at least one personal agent"
        )

    jwks_policy = JwksPolicy(**agents_raw.get("jwks", {}))
    if jwks_policy.min_ttl > jwks_policy.max_ttl:
        raise ConfigError("personal_agents.jwks.min_ttl", "must not exceed max_ttl")

    cache = CacheConfig(**{**raw.get("cache", {})})
    cache = CacheConfig(
        url=_expand_env(cache.url, "cache.url", environ),
        conversation_ttl=cache.conversation_ttl,
        closed_ttl=cache.closed_ttl,
        retry_window=cache.retry_window,
        pending_ttl=cache.pending_ttl,
        timeout=cache.timeout,
    )
    if cache.closed_ttl < cache.conversation_ttl:
        raise ConfigError("cache.closed_ttl", "must be at least conversation_ttl")

    brands: dict[str, BrandConfig] = {}
    domains: set[str] = set()
    for index, brand in enumerate(raw["brands"]):
        path = f"brands[{index}]"
        if brand["id"] in brands:
            raise ConfigError(f"{path}.id", f"duplicate brand id {brand['id']!r}")
        domain = brand.get("domain")
        if domain is not None:
            if domain.lower() in domains:
                raise ConfigError(f"{path}.domain", f"domain {domain!r} already belongs to another brand")
            domains.add(domain.lower())
        upstream = brand["upstream"]
        headers = {
            name: _expand_env(value, f"{path}.upstream.headers.{name}", environ)
            for name, value in upstream.get("headers", {}).items()
        }
        skill_ids: set[str] = set()
        skills: list[SkillConfig] = []
        for skill_index, skill in enumerate(brand.get("skills", [])):
            if skill["id"] in skill_ids:
                raise ConfigError(f"{path}.skills[{skill_index}].id", "duplicate skill id")
            skill_ids.add(skill["id"])
            skills.append(
                SkillConfig(skill["id"], skill["name"], skill["description"], tuple(skill.get("tags", ())))
            )
        brands[brand["id"]] = BrandConfig(
            id=brand["id"],
            name=brand["name"],
            description=brand["description"],
            version=str(brand["version"]),
            skills=tuple(skills),
            domain=domain,
            upstream=UpstreamConfig(
                url=upstream["url"],
                timeout=float(upstream.get("timeout", 10.0)),
                headers=headers,
                max_concurrency=upstream.get("max_concurrency", 64),
                queue_timeout=float(upstream.get("queue_timeout", 1.0)),
                circuit_breaker=CircuitBreakerConfig(**upstream.get("circuit_breaker", {})),
            ),
            rate_limits=_rate_limits(raw.get("rate_limits", {}), brand.get("rate_limits", {})),
            delegation=_delegation(brand.get("delegation"), f"{path}.delegation", development, environ),
        )

    oauth = OAuthConfig(signing_keys=_signing_keys(raw.get("oauth", {}), environ))
    delegating = [index for index, brand in enumerate(brands.values()) if brand.delegation is not None]
    if delegating and not oauth.signing_keys:
        raise ConfigError(
            "oauth.signing_keys",
            f"is required: brands[{delegating[0]}] enables delegation (§5.4 tokens are signed)",
        )

    listen_raw = raw.get("listen", {})
    return GatewayConfig(
        listen=ListenConfig(host=listen_raw.get("host", "0.0.0.0"), port=listen_raw.get("port", 8080)),  # noqa: S104
        public_url=raw["public_url"].rstrip("/"),
        development=development,
        security_scheme_name=raw.get("security_scheme_name", "paJwt"),
        provider=ProviderConfig(**raw["provider"]),
        personal_agents=PersonalAgentsConfig(policy=policy, registered=tuple(registered), jwks=jwks_policy),
        cache=cache,
        limits=LimitsConfig(**raw.get("limits", {})),
        rate_limits=_rate_limits(raw.get("rate_limits", {}), {}),
        metrics=MetricsConfig(**raw.get("metrics", {})),
        logging=LoggingConfig(**raw.get("logging", {})),
        reload=ReloadConfig(**raw.get("reload", {})),
        brands=brands,
        oauth=oauth,
        tracing=_tracing(raw.get("tracing", {}), environ),
    )


def load_config(raw: Any, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Validate an already-parsed YAML document and build the typed configuration."""
    _check_schema(raw)
    return _build(raw, os.environ if environ is None else environ)


def load_config_file(path: str | Path, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read, parse and validate a YAML configuration file; any failure is a :class:`ConfigError`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read {path}: {exc.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError("", f"{path} is not valid YAML{where}") from None
    return load_config(raw, environ)
