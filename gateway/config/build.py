"""From a parsed YAML document to the typed configuration: the second pass's semantic rules and the
builders of each part (personal agents, cache, Brands with their delegation, OAuth keys, tracing,
limits), and the entry points :func:`load_config` (``serve``) and :func:`check_config` (``check-config``).

The orchestration: the schema pass and the problem collector are :mod:`gateway.config.problems`'s,
the environment :mod:`gateway.config.environment`'s, a Brand's bot :mod:`gateway.config.upstream`'s,
the listeners :mod:`gateway.config.listeners`'s; this module runs every part, each on its own, and
builds :class:`~gateway.config.model.GatewayConfig` only once nothing was found.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gateway.config.details import _detail_types
from gateway.config.document import read_config_document
from gateway.config.environment import _bearer_secret, _env_reference, _Environment, _expand_env
from gateway.config.errors import ConfigError
from gateway.config.listeners import _admin, _listen, config_warnings
from gateway.config.model import (
    INTROSPECTION_FAILURES,
    BrandConfig,
    CacheConfig,
    CheckedConfig,
    DelegationConfig,
    GatewayConfig,
    JwksPolicy,
    LimitsConfig,
    LoggingConfig,
    LoginConfig,
    MetricsConfig,
    OAuthConfig,
    PersonalAgentConfig,
    PersonalAgentsConfig,
    ProviderConfig,
    RateLimitsConfig,
    RateRule,
    ReloadConfig,
    SkillConfig,
    TracingConfig,
)
from gateway.config.problems import _Problems
from gateway.config.schema import RATE_RULE_NAMES
from gateway.config.upstream import _upstream
from gateway.provider_keys import SigningKey, parse_signing_key
from gateway.redis_url import CLUSTER_SCHEMES, parse_redis_url


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


def _signing_keys(
    entries: Sequence[Mapping[str, Any]], environ: _Environment, problems: _Problems
) -> tuple[SigningKey, ...]:
    """§5.1 the Provider's keys, each from a file or from the environment (``value: ${NAME}``)."""
    keys: list[SigningKey] = []
    kids: set[str] = set()
    for index, entry in enumerate(entries):
        path = f"oauth.signing_keys[{index}]"
        key = problems.attempt(path, _signing_key, entry, path, environ, kids)
        if key is not None:
            keys.append(key)
    return tuple(keys)


def _signing_key(
    entry: Mapping[str, Any], path: str, environ: _Environment, kids: set[str]
) -> SigningKey | None:
    """One signing key, or ``None`` when its variable is not set and this check does not need it."""
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
        if environ.deferred(entry["value"]):
            return None
    try:
        key = parse_signing_key(material)
    except ValueError as exc:
        raise ConfigError(path, str(exc)) from None
    if key.kid in kids:
        raise ConfigError(path, f"duplicate kid {key.kid!r}")
    kids.add(key.kid)
    return key


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
    introspection = raw.get("introspection", {})
    secret = introspection.get("secret")
    secret_path = f"{path}.introspection.secret"
    return DelegationConfig(
        scopes=dict(raw["scopes"]),
        login=LoginConfig(
            url=login["url"], issuer=login["issuer"], jwks_uri=login.get("jwks_uri"), jwks=login.get("jwks")
        ),
        token_ttl=int(raw.get("token_ttl", 3600)),
        grant_ttl=int(raw.get("grant_ttl", 30 * 86400)),
        max_grants_per_user=int(raw.get("max_grants_per_user", 20)),
        refresh_grace=int(raw.get("refresh_grace", 0)),
        landing_url=raw.get("landing_url"),
        skip_consent=bool(raw.get("skip_consent", True)),
        # The admin token's rules: a guessable secret here would describe any User's tokens.
        introspection_secret=None
        if secret is None
        else _bearer_secret(_env_reference(secret, secret_path), secret_path, environ),
        introspection_failures=_rate_rule(introspection.get("failures", {}), INTROSPECTION_FAILURES),
        authorization_details=_detail_types(
            raw.get("authorization_details", []), raw["scopes"], f"{path}.authorization_details"
        ),
        max_authorization_details=int(raw.get("max_authorization_details", 8)),
        max_authorization_details_bytes=int(raw.get("max_authorization_details_bytes", 4096)),
        max_authorization_details_depth=int(raw.get("max_authorization_details_depth", 8)),
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


def _rate_rule(raw: Mapping[str, Any], default: RateRule) -> RateRule:
    """A rate rule's settings over ``default``, setting by setting."""
    return RateRule(
        rate=float(raw.get("rate", default.rate)),
        burst=int(raw.get("burst", default.burst)),
        enabled=bool(raw.get("enabled", default.enabled)),
    )


def _rate_limits(top: Mapping[str, Any], brand: Mapping[str, Any]) -> RateLimitsConfig:
    """§6 limits: the defaults, then the top-level ``rate_limits``, then a Brand's, setting by setting."""
    defaults = RateLimitsConfig()

    def rule(name: str, default: RateRule) -> RateRule:
        return _rate_rule({**top.get(name, {}), **brand.get(name, {})}, default)

    return RateLimitsConfig(
        **{name: rule(name, getattr(defaults, name)) for name in RATE_RULE_NAMES},
        fail_open=bool(brand.get("fail_open", top.get("fail_open", defaults.fail_open))),
    )


def _check_pending_ttl(cache: CacheConfig, brands: Mapping[str, BrandConfig]) -> None:
    """§4.3: an in-flight marker must outlive the longest turn, or a retry runs the bot a second time.

    A turn holds its marker from the claim to the stored reply: the claim, the wait for a bot
    slot (``queue_timeout``), the bot call (``timeout``), then the write of the reply; on Redis
    the claim and the write may each take ``cache.timeout``. A retry that finds the marker
    expired runs the bot again and stores the second answer, not the one the agent was given.
    """
    store = 2 * cache.timeout if cache.backend == "redis" else 0.0
    for index, brand in enumerate(brands.values()):
        upstream = brand.upstream
        turn = upstream.timeout + upstream.queue_timeout + store
        if cache.pending_ttl <= turn:
            parts = f"upstream.timeout {upstream.timeout:g} + queue_timeout {upstream.queue_timeout:g}"
            if store:
                parts += f" + 2 × cache.timeout {cache.timeout:g}"
            raise ConfigError(
                "cache.pending_ttl",
                f"must be longer than the longest turn of brands[{index}] ({brand.id}): {parts} = {turn:g} s;"
                " a retry after the in-flight marker expired would run the bot a second time",
            )


def _registered_agent(
    raw: Mapping[str, Any], path: str, development: bool, seen: set[str]
) -> PersonalAgentConfig:
    if raw["issuer"] in seen:
        raise ConfigError(f"{path}.issuer", "duplicate issuer")
    seen.add(raw["issuer"])
    jwks_uri = raw.get("jwks_uri")
    if jwks_uri is None and "jwks" not in raw:
        raise ConfigError(f"{path}.jwks_uri", "is required unless an inline jwks is given")
    if jwks_uri is not None:
        _check_fetch_url(jwks_uri, f"{path}.jwks_uri", development)
    name = raw.get("name")
    if name is not None and (not name.isprintable() or not name.strip()):
        raise ConfigError(f"{path}.name", "must be printable text, not only spaces")
    return PersonalAgentConfig(
        issuer=raw["issuer"],
        jwks_uri=jwks_uri,
        enabled=raw.get("enabled", True),
        jwks=raw.get("jwks"),
        name=name,
    )


def _jwks_policy(raw: Mapping[str, Any]) -> JwksPolicy:
    policy = JwksPolicy(**raw)
    if policy.min_ttl > policy.max_ttl:
        raise ConfigError("personal_agents.jwks.min_ttl", "must not exceed max_ttl")
    return policy


def _personal_agents(
    raw: Mapping[str, Any], development: bool, problems: _Problems
) -> PersonalAgentsConfig | None:
    """§3.1 who may call: each registered agent is checked on its own."""
    if problems.broken("personal_agents"):
        return None
    policy = raw.get("policy", "allowlist")
    registered: list[PersonalAgentConfig] = []
    if not problems.broken("personal_agents.registered"):
        seen: set[str] = set()
        for index, agent in enumerate(raw.get("registered", [])):
            path = f"personal_agents.registered[{index}]"
            built = problems.attempt(path, _registered_agent, agent, path, development, seen)
            if built is not None:
                registered.append(built)
    quiet = problems.touched("personal_agents.registered") or problems.touched("personal_agents.policy")
    if policy == "allowlist" and not raw.get("registered") and not quiet:
        problems.note("personal_agents.registered", "the allowlist policy needs at least one personal agent")
    jwks = problems.attempt("personal_agents.jwks", _jwks_policy, raw.get("jwks", {}))
    if jwks is None or problems.touched("personal_agents"):
        return None
    return PersonalAgentsConfig(policy=policy, registered=tuple(registered), jwks=jwks)


def _cache(raw: Mapping[str, Any], environ: _Environment) -> CacheConfig:
    cache = CacheConfig(**raw)
    cache = replace(cache, url=_expand_env(cache.url, "cache.url", environ))
    if cache.closed_ttl < cache.conversation_ttl:
        raise ConfigError("cache.closed_ttl", "must be at least conversation_ttl")
    if cache.backend == "redis":
        for name in ("max_entries", "person_share"):
            if name in raw:
                raise ConfigError(f"cache.{name}", "memory:// only: bound Redis with its own maxmemory")
        cache = replace(cache, max_entries=None)
    elif "key_layout" in raw:
        raise ConfigError("cache.key_layout", "Redis only: the memory store has no key layout")
    if cache.key_layout == "previous" and urlsplit(cache.url).scheme in CLUSTER_SCHEMES:
        raise ConfigError(
            "cache.key_layout",
            "previous is refused on a Redis Cluster: the previous release's keys span hash slots, and a"
            " cluster never held them (tagged is the layout a cluster runs)",
        )
    if cache.backend == "redis" and not environ.deferred(raw.get("url", "")):
        try:
            parse_redis_url(cache.url)
        except ValueError as exc:
            raise ConfigError("cache.url", str(exc)) from None
    return cache


def _limits(raw: Mapping[str, Any]) -> LimitsConfig:
    limits = LimitsConfig(**raw)
    if limits.bot_answer_head_bytes < limits.bot_answer_line_bytes:
        raise ConfigError("limits.bot_answer_head_bytes", "must be at least bot_answer_line_bytes")
    return limits


def _skills(raw: Sequence[Mapping[str, Any]], path: str) -> tuple[SkillConfig, ...]:
    ids: set[str] = set()
    skills: list[SkillConfig] = []
    for index, skill in enumerate(raw):
        if skill["id"] in ids:
            raise ConfigError(f"{path}[{index}].id", "duplicate skill id")
        ids.add(skill["id"])
        skills.append(
            SkillConfig(skill["id"], skill["name"], skill["description"], tuple(skill.get("tags", ())))
        )
    return tuple(skills)


def _brand(
    raw: Mapping[str, Any],
    path: str,
    top: Mapping[str, Any],
    development: bool,
    environ: _Environment,
    problems: _Problems,
) -> BrandConfig | None:
    """One Brand, its bot, its delegation and its skills each checked on their own; ``None`` when
    one of them has a problem."""
    if problems.broken(path):
        return None
    upstream = problems.attempt(
        f"{path}.upstream", _upstream, raw.get("upstream", {}), f"{path}.upstream", environ
    )
    delegation = problems.attempt(
        f"{path}.delegation", _delegation, raw.get("delegation"), f"{path}.delegation", development, environ
    )
    skills = problems.attempt(f"{path}.skills", _skills, raw.get("skills", []), f"{path}.skills")
    if upstream is None or skills is None or problems.touched(path) or problems.touched("rate_limits"):
        return None
    return BrandConfig(
        id=raw["id"],
        name=raw["name"],
        description=raw["description"],
        version=str(raw["version"]),
        skills=skills,
        domain=raw.get("domain"),
        upstream=upstream,
        rate_limits=_rate_limits(top.get("rate_limits", {}), raw.get("rate_limits", {})),
        delegation=delegation,
    )


def _brands(
    raw: Mapping[str, Any], development: bool, environ: _Environment, problems: _Problems
) -> dict[str, BrandConfig]:
    """Every Brand that has no problem of its own, by id; ids and domains are each one Brand's."""
    brands: dict[str, BrandConfig] = {}
    if problems.broken("brands"):
        return brands
    domains: set[str] = set()
    for index, brand_raw in enumerate(raw["brands"]):
        path = f"brands[{index}]"
        brand = _brand(brand_raw, path, raw, development, environ, problems)
        if brand is None:
            continue
        if brand.id in brands:
            problems.note(f"{path}.id", f"duplicate brand id {brand.id!r}")
        elif brand.domain is not None and brand.domain.lower() in domains:
            problems.note(f"{path}.domain", f"domain {brand.domain!r} already belongs to another brand")
        else:
            if brand.domain is not None:
                domains.add(brand.domain.lower())
            brands[brand.id] = brand
    return brands


def _oauth(raw: Mapping[str, Any], environ: _Environment, problems: _Problems) -> OAuthConfig:
    """§5.4: the Provider's signing keys, required once any Brand delegates."""
    if problems.broken("oauth.signing_keys"):
        return OAuthConfig()
    entries = raw.get("oauth", {}).get("signing_keys", [])
    delegating = (
        []
        if problems.broken("brands")
        else [
            index
            for index, brand in enumerate(raw["brands"])
            if not problems.broken(f"brands[{index}]") and "delegation" in brand
        ]
    )
    if delegating and not entries:
        problems.note(
            "oauth.signing_keys",
            f"is required: brands[{delegating[0]}] enables delegation (§5.4 tokens are signed)",
        )
    return OAuthConfig(signing_keys=_signing_keys(entries, environ, problems))


def _build(raw: Mapping[str, Any], environ: _Environment, problems: _Problems) -> GatewayConfig:
    """The typed configuration, once every part has been checked; every problem at once otherwise."""
    development = raw.get("development", False) is True
    personal_agents = _personal_agents(raw.get("personal_agents", {}), development, problems)
    cache = problems.attempt("cache", _cache, raw.get("cache", {}), environ)
    brands = _brands(raw, development, environ, problems)
    if cache is not None and not problems.broken("brands") and len(brands) == len(raw["brands"]):
        problems.attempt("cache.pending_ttl", _check_pending_ttl, cache, brands)
    oauth = _oauth(raw, environ, problems)
    admin = problems.attempt(
        "admin", _admin, raw.get("admin", {}), raw.get("listen", {}), raw.get("metrics", {}), environ
    )
    tracing = problems.attempt("tracing", _tracing, raw.get("tracing", {}), environ)
    listen = problems.attempt("listen", _listen, raw.get("listen", {}))
    limits = problems.attempt("limits", _limits, raw.get("limits", {}))
    if (
        problems.found
        or personal_agents is None
        or cache is None
        or admin is None
        or tracing is None
        or listen is None
        or limits is None
    ):
        raise problems.error()

    return GatewayConfig(
        listen=listen,
        public_url=raw["public_url"].rstrip("/"),
        development=development,
        security_scheme_name=raw.get("security_scheme_name", "paJwt"),
        provider=ProviderConfig(**raw["provider"]),
        personal_agents=personal_agents,
        cache=cache,
        limits=limits,
        rate_limits=_rate_limits(raw.get("rate_limits", {}), {}),
        metrics=MetricsConfig(**raw.get("metrics", {})),
        admin=admin,
        logging=LoggingConfig(**raw.get("logging", {})),
        reload=ReloadConfig(**raw.get("reload", {})),
        brands=brands,
        oauth=oauth,
        tracing=tracing,
    )


def _load(raw: Any, environ: _Environment) -> GatewayConfig:
    problems = _Problems(raw)
    if not isinstance(raw, dict):
        raise problems.error()
    return _build(raw, environ, problems)


def load_config(raw: Any, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Validate an already-parsed YAML document and build the typed configuration.

    Every ``${NAME}`` must be set in ``environ`` (the process environment by default): this is
    what ``serve`` runs. Any problem is a :class:`ConfigError` carrying every problem found.
    """
    return _load(raw, _Environment(os.environ if environ is None else environ, require=True))


def load_config_file(path: str | Path, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read, parse and validate a YAML configuration file as :func:`load_config` does."""
    return load_config(read_config_document(path), environ)


def check_config_file(path: str | Path, environ: Mapping[str, str] | None = None) -> CheckedConfig:
    """``check-config``: as :func:`load_config_file`, but a ``${NAME}`` that is not set is a note.

    The file is often checked where its secrets are not (a laptop, CI); :attr:`CheckedConfig.unset`
    names what ``serve`` will need, and what only those values could be checked against (a
    signing key's PEM, a Redis URL with a password in a variable) is left unchecked.
    """
    return check_config(read_config_document(path), environ)


def check_config(raw: Any, environ: Mapping[str, str] | None = None) -> CheckedConfig:
    """:func:`check_config_file` for a document already parsed (``check-config -`` reads stdin)."""
    lenient = _Environment(os.environ if environ is None else environ, require=False)
    config = _load(raw, lenient)
    return CheckedConfig(config=config, unset=tuple(sorted(lenient.unset)), warnings=config_warnings(config))
