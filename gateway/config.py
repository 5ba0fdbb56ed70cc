"""Typed gateway configuration, loaded and validated once at start-up.

The YAML is checked in two passes: a JSON Schema for shape and types (so every error
names the YAML path of the bad value), then the semantic rules a schema cannot say
(HTTPS-only JWKS outside development, unique ids, environment variables present).
Only then is it turned into frozen dataclasses, so the rest of the gateway never sees
an unchecked value.

Both passes collect every problem rather than stopping at the first: an operator fixes a file
in one round instead of one error per run. A rule of the second pass is skipped for a part
the first pass already found malformed (it would only repeat the problem, or misread it).
"""

from __future__ import annotations

import difflib
import importlib.util
import ipaddress
import os
import re
import socket
import string
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib.resources.abc import Traversable
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import Any, Final, Literal, ParamSpec, TypeVar, get_args
from urllib.parse import urlsplit

import jmespath
import jsonschema
import yaml

from gateway.provider_keys import SigningKey, parse_signing_key
from gateway.redis_url import CLUSTER_SCHEMES, parse_redis_url

__all__ = [
    "ADAPTERS",
    "ADMIN_TOKEN_MIN",
    "MAX_AGENT_NAME",
    "AdapterName",
    "AdminConfig",
    "BrandConfig",
    "CacheConfig",
    "CheckedConfig",
    "CircuitBreakerConfig",
    "ConfigError",
    "ConfigProblem",
    "DelegationConfig",
    "DirectLineSettings",
    "GatewayConfig",
    "HttpMappingSettings",
    "HttpReplyPaths",
    "JwksPolicy",
    "LimitsConfig",
    "ListenConfig",
    "LoggingConfig",
    "LoginConfig",
    "MetricsConfig",
    "OAuthConfig",
    "OpenAISettings",
    "PersonalAgentConfig",
    "PersonalAgentsConfig",
    "ProviderConfig",
    "RasaSettings",
    "RateLimitsConfig",
    "RateRule",
    "ReloadConfig",
    "SkillConfig",
    "TracingConfig",
    "UpstreamConfig",
    "check_config",
    "check_config_file",
    "config_document_from_stream",
    "config_warnings",
    "load_config",
    "load_config_file",
    "read_config_document",
]

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_BRAND_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_HTTP_URL = r"^https?://"
_CACHE_URL = r"^(memory|redis|rediss|redis\+sentinel|redis\+cluster|rediss\+cluster)://"
_DOMAIN = r"^[A-Za-z0-9.-]+$"
_ABSOLUTE_URI = r"^[A-Za-z][A-Za-z0-9+.-]*:\S+$"
_FAILOVER_SCHEMES = frozenset({"redis+sentinel", *CLUSTER_SCHEMES})
"""URL schemes whose primary a failover replaces by a replica: ``wait_replicas`` defaults to 1."""
_SCHEME_NAME = r"^[A-Za-z][A-Za-z0-9_-]*$"
_HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"  # RFC 9110 §5.6.2 token
_P = ParamSpec("_P")
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with a file: the YAML path of the bad value (empty for the file as a whole) and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path else self.reason


class ConfigError(ValueError):
    """A configuration file that cannot be served, with every problem found in it (``problems``).

    ``path`` (the YAML path of the bad value) and ``reason`` are the first problem's.
    """

    def __init__(self, path: str, reason: str, *more: ConfigProblem) -> None:
        self.problems = (ConfigProblem(path, reason), *more)
        super().__init__("; ".join(map(str, self.problems)))
        self.path = path
        self.reason = reason

    @classmethod
    def of(cls, problems: Sequence[ConfigProblem]) -> ConfigError:
        first, *more = problems
        return cls(first.path, first.reason, *more)


ForwardedHeader = Literal["X-Forwarded-For", "Forwarded"]
"""The header a trusted proxy appends the address it received a request from to."""


@dataclass(frozen=True, slots=True)
class ListenConfig:
    """The public listener, and which peers may tell it who the client is.

    ``trusted_proxies`` (none by default) are the networks whose ``forwarded_header`` is believed
    (:func:`gateway.http.client_address.client_address`): a request from anywhere else is its
    peer's. One header, not both: a proxy that appends to one passes the other through as the
    client wrote it.
    """

    host: str = "0.0.0.0"  # noqa: S104 - a gateway in a container listens on every interface
    port: int = 8080
    trusted_proxies: tuple[IPv4Network | IPv6Network, ...] = ()
    forwarded_header: ForwardedHeader = "X-Forwarded-For"
    backlog: int = 4096
    """Connections the kernel holds for the gateway before it accepts them (``listen(2)``), capped by
    ``net.core.somaxconn``. aiohttp's own 128 refused a burst of thousands of slow turns at the door."""
    ipv6_prefix: int = 64
    """Per-address limits count an IPv6 client by its ``/ipv6_prefix`` network (48 to 64): one host
    is usually given a whole /64, so a limit per full address is no limit at all."""


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
    name: str | None = None
    """What the consent page calls this agent (§5.3), beside its issuer host; ``None`` shows the host only."""


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
    # discovery documents take, in a partition of their own (registered issuers' keys are never
    # dropped for room). The least recently used is dropped first.
    max_cached_issuers: int = 4096
    # Fetches for open-policy issuers (discovery and key sets together), for the whole process:
    # this many per second sustained, bursts of open_fetch_burst; a refused fetch is not made.
    open_fetch_rate: float = 5.0
    open_fetch_burst: int = 20


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


KeyLayoutName = Literal["tagged", "previous"]
KEY_LAYOUTS: tuple[KeyLayoutName, ...] = get_args(KeyLayoutName)


@dataclass(frozen=True, slots=True)
class CacheConfig:
    url: str = field(default="memory://", repr=False)
    """May carry the Redis password: kept out of ``repr`` (tracebacks, test failure printouts)."""
    conversation_ttl: int = 86400
    closed_ttl: int = 7 * 86400
    retry_window: int = 300
    pending_ttl: int = 60
    timeout: float = 2.0  # seconds a Redis command or connection attempt may take
    wait_replicas: int | None = None
    """Redis ``WAIT``: replicas that must hold a claim or a reply before the turn goes on; ``None`` is
    1 under Sentinel and on a Redis Cluster (a failover must not lose a reply a client was given: both
    promote a replica, and replication is asynchronous) and 0 otherwise."""
    key_layout: KeyLayoutName = "tagged"
    """Redis only: the key layout written (gateway/store/keys.py). ``tagged`` keeps every key one
    script touches in one Redis Cluster slot (issue 20); ``previous`` writes what the previous release
    wrote, so its replicas can serve beside this one's during a rolling upgrade. Both are always read."""
    max_entries: int | None = 300_000
    """``memory://`` only: the entries the process keeps at most (gateway/store/memory.py); ``None``
    on Redis, which bounds itself (``maxmemory``). The default fits the Helm chart's 512 MiB limit
    (docs/capacity.md, Memory store bound)."""
    person_share: float = 0.01
    """``memory://`` only: the share of ``max_entries`` one person (Brand, personal agent, ``sub``) may
    hold; past it, their own least recently used conversation makes room for their next, never anyone
    else's (issue 29). 1% of the default bound is about 1,000 conversations."""

    @property
    def backend(self) -> Literal["memory", "redis"]:
        return "memory" if urlsplit(self.url).scheme == "memory" else "redis"

    @property
    def replicas(self) -> int:
        """:attr:`wait_replicas` with its default resolved."""
        if self.wait_replicas is not None:
            return self.wait_replicas
        return 1 if urlsplit(self.url).scheme in _FAILOVER_SCHEMES else 0


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_body_bytes: int = 65536
    request_timeout: float = 30.0
    shutdown_timeout: float = 20.0  # seconds in-flight requests get to finish after SIGTERM
    max_bot_calls: int = 4000
    """Bot calls in flight in this process, every Brand together: what bounds the memory turns in
    flight hold (each Brand's ``upstream.max_concurrency`` bounds only its own bot's share)."""
    bot_answer_line_bytes: int = 8192
    """The longest status line, header field line or trailer field line a bot's answer may carry,
    its CRLF included (aiohttp's 8,190 bytes before it, the bound before the gateway's own client).
    Process-wide, as the one client that reads every Brand's answers: past it the call is a bad answer."""
    bot_answer_head_bytes: int = 65536
    """The most bytes of head (interim 1xx heads included) a bot's answer may take; its trailers get as
    many of their own."""
    bot_answer_fields: int = 100
    """The most header fields a bot's answer may carry (interim heads included); its trailers as many."""


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """The operations listener: Prometheus ``/metrics``, ``/healthz`` and ``/readyz``."""

    enabled: bool = True
    host: str = "0.0.0.0"  # noqa: S104 - scraped from outside the pod
    port: int = 9090


ADMIN_TOKEN_MIN = 32
"""Characters the admin API's bearer token, and every bearer secret the gateway checks (a Brand's
introspection secret), must have at least (``openssl rand -hex 32`` makes 64)."""
MAX_AGENT_NAME = 80
"""Characters a registered personal agent's display ``name`` may have: one line on a phone's consent page."""


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """The operator API (gateway/process/admin.py): a person's conversations, and forgetting them.
    Off unless ``enabled``; then served on its own listener ``host:port`` (loopback by default: the
    ops listener binds every interface for the scrapers, the admin API must not ride along), and
    every request needs ``Authorization: Bearer {token}``."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 9091
    token: str = field(default="", repr=False)
    """Only ever from ``${NAME}``, never written in the file; kept out of ``repr``."""


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
    device_authorization: RateRule = field(default_factory=lambda: RateRule(rate=1 / 12, burst=5))
    """RFC 8628 §3.1 per (personal agent, ``sub``): each one asks a person to sign in (5 a minute)."""
    login_assertion: RateRule = field(default_factory=lambda: RateRule(rate=1.0, burst=20))
    """§5.3 hand-offs to the consent URL per client address: each costs a signature check."""
    consent_decision: RateRule = field(default_factory=lambda: RateRule(rate=1.0, burst=20))
    """§5.3 consent decisions per client address."""
    wrong_user_code_per_user: RateRule = field(default_factory=lambda: RateRule(rate=1 / 60, burst=5))
    """RFC 8628 §5.1 wrong ``user_code``s per Brand login user: 5, then one a minute."""
    wrong_user_code_per_address: RateRule = field(default_factory=lambda: RateRule(rate=1 / 30, burst=10))
    """RFC 8628 §5.1 wrong ``user_code``s per client address: 10, then one every 30 s."""
    wrong_user_code_per_brand: RateRule = field(default_factory=lambda: RateRule(rate=0.2, burst=60))
    """RFC 8628 §5.1 wrong ``user_code``s at one Brand from everyone: 60, then 12 a minute."""
    wrong_user_code_grace: RateRule = field(default_factory=lambda: RateRule(rate=1 / 86400, burst=1))
    """While the Brand's wrong-code budget is spent, a Brand login user and an address that both have
    not tried a wrong code within ``burst / rate`` seconds may still try (one a day by default), so an
    attacker keeping that budget spent does not refuse everyone's sign-in (THREAT_MODEL.md F1)."""
    fail_open: bool = True


@dataclass(frozen=True, slots=True)
class CircuitBreakerConfig:
    """Open after ``failures`` consecutive failed bot calls within ``window`` s; probe after ``cooldown``."""

    enabled: bool = True
    failures: int = 5
    window: float = 30.0
    cooldown: float = 15.0


@dataclass(frozen=True, slots=True)
class RasaSettings:
    """``upstream.rasa``: the Rasa REST channel (gateway/upstream/rasa.py).

    ``metadata`` sends the PA issuer and a hash of ``sub`` as the message's ``metadata`` (the bot's
    tracker keeps it); ``no_answer`` is the reply when the bot answered with no message at all.
    """

    metadata: bool = False
    no_answer: str = "Sorry, I have no answer to that."


@dataclass(frozen=True, slots=True)
class HttpReplyPaths:
    """JMESPath expressions over a home-grown bot's JSON answer (gateway/upstream/http_mapping.py)."""

    text: str | None = None
    texts: str | None = None
    end: str | None = None
    requires_scopes: str | None = None
    actions: str | None = None
    scopes_used: str | None = None
    requires_authorization_details: str | None = None


@dataclass(frozen=True, slots=True)
class HttpMappingSettings:
    """``upstream.http``: a home-grown bot described in YAML (gateway/upstream/http_mapping.py).

    ``body`` is a JSON template: a string that is exactly one ``{{placeholder}}`` becomes the
    value itself (any JSON type), other strings have placeholders replaced by their text.
    """

    body: Any
    reply: HttpReplyPaths
    method: Literal["POST", "PUT", "PATCH"] = "POST"
    probe_url: str | None = None


@dataclass(frozen=True, slots=True)
class OpenAISettings:
    """``upstream.openai``: an OpenAI-compatible chat completions API (gateway/upstream/openai.py).

    ``system_prompt`` is the text of ``system_prompt`` or of ``system_prompt_file`` (read at load).
    The history the gateway keeps per conversation is bounded by both ``max_history_turns``
    (user/assistant pairs) and ``max_history_chars``, oldest pair dropped first. The key goes in
    ``api_key_header``: ``Authorization`` as ``Bearer <key>``, any other (Azure's ``api-key``) bare.
    """

    model: str
    system_prompt: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_key_header: str = "Authorization"
    max_tokens: int | None = None
    temperature: float | None = None
    max_history_turns: int = 10
    max_history_chars: int = 16000


@dataclass(frozen=True, slots=True)
class DirectLineSettings:
    """``upstream.directline``: a Bot Framework Direct Line 3.0 bot (gateway/upstream/directline.py).

    The bot's answer to a turn is complete at a message with ``inputHint: expectingInput``, at
    ``endOfConversation``, or after ``quiet_period`` seconds with no new message or ``typing`` from
    the bot (``acceptingInput`` is on every SDK message: no end); ``poll_interval`` is the wait
    between two reads of the activities.
    ``no_answer`` is the reply when the answer held nothing that renders as text.
    """

    secret: str = field(repr=False)
    poll_interval: float = 0.3
    quiet_period: float = 1.0
    no_answer: str = "Sorry, I have no answer to that."


AdapterName = Literal["pact", "rasa", "openai", "directline", "http"]
ADAPTERS: tuple[AdapterName, ...] = ("pact", "rasa", "openai", "directline", "http")
"""``upstream.adapter``: how the gateway speaks to a Brand's bot; every one but ``pact`` has a settings
block of its own name under ``upstream`` (gateway/upstream/factory.py picks the module)."""


MAX_CONCURRENCY: Final = 2000
"""``upstream.max_concurrency``'s default: bot calls in flight per Brand and process. In flight is
turns/s × the bot's latency, so 2000 serves 400 to 2000 turns/s of a bot taking 1 to 5 s."""


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    url: str
    timeout: float = 10.0
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Static headers on every bot call, typically the bot's credential: kept out of ``repr``."""
    max_concurrency: int = MAX_CONCURRENCY
    queue_timeout: float = 1.0
    circuit_breaker: CircuitBreakerConfig = field(default_factory=CircuitBreakerConfig)
    adapter: AdapterName = "pact"
    rasa: RasaSettings | None = None
    http: HttpMappingSettings | None = None
    openai: OpenAISettings | None = None
    directline: DirectLineSettings | None = None


@dataclass(frozen=True, slots=True)
class LoginConfig:
    """§5.3 the Brand's own login: where the User signs in, and who signs the assertion it posts back."""

    url: str
    issuer: str
    jwks_uri: str | None = None
    jwks: Mapping[str, Any] | None = None


INTROSPECTION_FAILURES = RateRule(rate=0.1, burst=10)
"""The default ``delegation.introspection.failures``: the Brand's back-end holds the secret, so it
fails only when misconfigured, and anyone else gets ten guesses and then one per 10 s."""


@dataclass(frozen=True, slots=True)
class AuthorizationDetailType:
    """One RFC 9396 §2 authorization details type a delegating Brand accepts.

    A detail of this type is a condition of one of :attr:`scopes` (the person approves it with
    that scope, never on its own); :attr:`fields` is the JSON Schema (draft 2020-12, an object
    schema) of its members other than ``type`` and ``actions``, and no member it does not name
    is ever accepted.
    """

    type: str
    """The type's absolute URI (RFC 9396 §2 ``type``), as the metadata's
    ``authorization_details_types_supported`` lists it."""
    scopes: tuple[str, ...]
    """The card's scopes it belongs to, in card order."""
    actions: tuple[str, ...]
    """The RFC 9396 §2.2 ``actions`` a detail may ask; one without ``actions`` allows all of these."""
    fields: Mapping[str, Any]
    consent: str
    """The consent page's sentence for one detail, its ``{field}`` placeholders filled in (escaped)."""


@dataclass(frozen=True, slots=True)
class DelegationConfig:
    """§5 for one Brand: its scopes (id → description, in card order), its login, and lifetimes."""

    scopes: Mapping[str, str]
    login: LoginConfig
    token_ttl: int = 3600
    grant_ttl: int = 30 * 86400
    max_grants_per_user: int = 20
    """Live grants one Brand user may hold at this Brand (one per personal agent and ``sub`` they
    delegated to); the next supersedes the oldest (issue 28, L4): a person with several assistants
    stays well under it, one account minting grants for fresh ``sub``s cannot pile them up."""
    refresh_grace: int = 0
    """Seconds after a refresh in which its refresh token, presented again, gets the same answer
    (a client whose answer was lost) rather than revoking the grant as reuse. Off (0) by default:
    PACT's suites refuse a spent refresh token presented at once (conformance notes), and a thief
    replaying it inside the grace gets the same tokens as the owner (RFC 9700 §4.14.2)."""
    landing_url: str | None = None
    skip_consent: bool = True
    introspection_secret: str | None = field(default=None, repr=False)
    """RFC 7662: the Brand back-end's bearer credential for introspection; ``None`` turns it off."""
    introspection_failures: RateRule = INTROSPECTION_FAILURES
    """Wrong introspection credentials per client address: ``burst`` at once, then one per
    ``1/rate`` s; past that the address is answered ``429`` before its credential is compared."""
    authorization_details: Mapping[str, AuthorizationDetailType] = field(default_factory=dict)
    """RFC 9396 types by ``type``, in configuration order; none: ``authorization_details`` is refused."""
    max_authorization_details: int = 8
    """Details one request may ask and one grant may hold."""
    max_authorization_details_bytes: int = 4096
    """UTF-8 bytes of one ``authorization_details`` parameter (at most 4096, so that a delegation
    token carrying them still fits a request header)."""
    max_authorization_details_depth: int = 8
    """JSON nesting of one detail (an object of strings is 1)."""


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
    admin: AdminConfig = field(default_factory=AdminConfig)
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


@dataclass(frozen=True, slots=True)
class CheckedConfig:
    """What ``check-config`` learns from a file: its configuration, and the environment variables it
    names that are not set here, which ``serve`` will need (their ``${NAME}`` is left as written)."""

    config: GatewayConfig
    unset: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    """:func:`config_warnings`: allowed, but most likely a mistake."""


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
RATE_RULE_NAMES: Final = (
    "per_agent",
    "per_user",
    "device_authorization",
    "login_assertion",
    "consent_decision",
    "wrong_user_code_per_user",
    "wrong_user_code_per_address",
    "wrong_user_code_per_brand",
    "wrong_user_code_grace",
)
"""Every named rule of ``rate_limits`` (each but the grace also a ``limit`` label of
``pact_rate_limited_total``: a refusal the grace could not lift is the Brand budget's)."""
_RATE_LIMITS = _obj({**dict.fromkeys(RATE_RULE_NAMES, _RATE_RULE), "fail_open": {"type": "boolean"}})
_JWKS_OBJECT = {
    "type": "object",
    "required": ["keys"],
    "properties": {"keys": {"type": "array", "items": {"type": "object"}}},
}
# RFC 6749 §3.3 scope-token: printable ASCII but space, '"' and '\\'.
_SCOPE_ID = r"^[\x21\x23-\x5B\x5D-\x7E]{1,128}$"
_AUTHORIZATION_DETAIL_TYPE = _obj(
    {
        "type": {**_STR, "maxLength": 256, "pattern": _ABSOLUTE_URI},
        "scopes": {"type": "array", "minItems": 1, "uniqueItems": True, "items": _STR},
        "actions": {
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": {**_STR, "maxLength": 128},
        },
        "fields": {"type": "object"},
        "consent": {**_STR, "maxLength": 500},
    },
    ["type", "scopes", "actions", "fields", "consent"],
)
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
                "url": {**_STR, "pattern": _HTTP_URL},
                "issuer": _STR,
                "jwks_uri": _STR,
                "jwks": _JWKS_OBJECT,
            },
            ["url", "issuer"],
        ),
        "token_ttl": {"type": "integer", "minimum": 60, "maximum": 3600},
        "grant_ttl": {"type": "integer", "minimum": 60},
        "max_grants_per_user": {"type": "integer", "minimum": 1, "maximum": 1000},
        "refresh_grace": {"type": "integer", "minimum": 0, "maximum": 60},
        "landing_url": {**_STR, "pattern": _HTTP_URL},
        "skip_consent": {"type": "boolean"},
        "introspection": _obj({"secret": _STR, "failures": _RATE_RULE}, ["secret"]),
        "authorization_details": {"type": "array", "items": _AUTHORIZATION_DETAIL_TYPE},
        "max_authorization_details": {"type": "integer", "minimum": 1, "maximum": 64},
        # At most 4096: the details ride in every delegation token, which a turn takes in one header
        # of at most MAX_TOKEN_LENGTH (8192) characters; 4096 bytes make a token of about 6,000.
        "max_authorization_details_bytes": {"type": "integer", "minimum": 256, "maximum": 4096},
        "max_authorization_details_depth": {"type": "integer", "minimum": 1, "maximum": 32},
    },
    ["scopes", "login"],
)
_RASA = _obj({"metadata": {"type": "boolean"}, "no_answer": _STR})
_OPENAI = _obj(
    {
        "model": _STR,
        "system_prompt": _STR,
        "system_prompt_file": _STR,
        "api_key": _STR,
        "api_key_header": {**_STR, "pattern": _HEADER_NAME},
        "max_tokens": _POS_INT,
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "max_history_turns": {"type": "integer", "minimum": 0},
        "max_history_chars": {"type": "integer", "minimum": 0},
    },
    ["model"],
)
_DIRECTLINE = _obj(
    {
        "secret": _STR,
        "poll_interval": {"type": "number", "minimum": 0.01},
        "quiet_period": _POS_NUM,
        "no_answer": _STR,
    },
    ["secret"],
)
_JMESPATH = _STR
_HTTP_MAPPING = _obj(
    {
        "method": {"enum": ["POST", "PUT", "PATCH"]},
        "body": {},
        "reply": _obj(
            {
                "text": _JMESPATH,
                "texts": _JMESPATH,
                "end": _JMESPATH,
                "requires_scopes": _JMESPATH,
                "actions": _JMESPATH,
                "scopes_used": _JMESPATH,
                "requires_authorization_details": _JMESPATH,
            }
        ),
        "probe_url": {**_STR, "pattern": _HTTP_URL},
    },
    ["body", "reply"],
)
_SIGNING_KEY = {
    "type": "object",
    "properties": {"file": _STR, "value": _STR},
    "additionalProperties": False,
}

SCHEMA: dict[str, Any] = _obj(
    {
        "listen": _obj(
            {
                "host": _STR,
                "port": {"type": "integer", "minimum": 0, "maximum": 65535},
                "trusted_proxies": {"type": "array", "items": _STR},
                "forwarded_header": {"enum": ["X-Forwarded-For", "Forwarded"]},
                "backlog": {"type": "integer", "minimum": 1, "maximum": 65535},
                "ipv6_prefix": {"type": "integer", "minimum": 48, "maximum": 64},
            }
        ),
        "public_url": {**_STR, "pattern": _HTTP_URL},
        "development": {"type": "boolean"},
        "security_scheme_name": {**_STR, "pattern": _SCHEME_NAME},
        "provider": _obj(
            {"organization": _STR, "url": {**_STR, "pattern": _HTTP_URL}, "audience": _STR},
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
                            "name": {**_STR, "minLength": 1, "maxLength": MAX_AGENT_NAME},
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
                        "open_fetch_rate": _POS_NUM,
                        "open_fetch_burst": _POS_INT,
                    }
                ),
            }
        ),
        "cache": _obj(
            {
                "url": {**_STR, "pattern": _CACHE_URL},
                "conversation_ttl": _POS_INT,
                "closed_ttl": _POS_INT,
                "retry_window": _POS_INT,
                "pending_ttl": _POS_INT,
                "timeout": _POS_NUM,
                "wait_replicas": {"type": "integer", "minimum": 0},
                "key_layout": {"enum": list(KEY_LAYOUTS)},
                "max_entries": _POS_INT,
                "person_share": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            }
        ),
        "limits": _obj(
            {
                "max_body_bytes": _POS_INT,
                "request_timeout": _POS_NUM,
                "shutdown_timeout": _POS_NUM,
                "max_bot_calls": _POS_INT,
                # Room for a status line and the fields every answer has; the head at least one line.
                "bot_answer_line_bytes": {"type": "integer", "minimum": 256, "maximum": 1048576},
                "bot_answer_head_bytes": {"type": "integer", "minimum": 1024, "maximum": 16777216},
                "bot_answer_fields": {"type": "integer", "minimum": 8, "maximum": 10000},
            }
        ),
        "rate_limits": _RATE_LIMITS,
        "metrics": _obj(
            {
                "enabled": {"type": "boolean"},
                "host": _STR,
                "port": {"type": "integer", "minimum": 0, "maximum": 65535},
            }
        ),
        "admin": _obj(
            {
                "enabled": {"type": "boolean"},
                "host": _STR,
                "port": {"type": "integer", "minimum": 0, "maximum": 65535},
                "token": _STR,
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
                    "domain": {**_STR, "pattern": _DOMAIN},
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
                            "adapter": {"enum": list(ADAPTERS)},
                            "url": {**_STR, "pattern": _HTTP_URL},
                            "timeout": _POS_NUM,
                            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                            "rasa": _RASA,
                            "http": _HTTP_MAPPING,
                            "openai": _OPENAI,
                            "directline": _DIRECTLINE,
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


_PATTERN_RULES: Mapping[str, str] = {
    _HTTP_URL: "must be an http:// or https:// URL",
    _BRAND_ID: "must be 1 to 64 letters, digits, '.', '_' or '-', the first a letter or a digit",
    _SCOPE_ID: "must be an OAuth scope: 1 to 128 printable ASCII characters but space, '\"' and '\\' "
    "(RFC 6749 §3.3)",
    _HEADER_NAME: "must be an HTTP header name: letters, digits and !#$%&'*+.^_`|~- (RFC 9110 §5.6.2)",
    _SCHEME_NAME: "must be a letter followed by letters, digits, '_' or '-'",
    _CACHE_URL: "must start with memory://, redis://, rediss://, redis+sentinel://, redis+cluster:// or "
    "rediss+cluster://",
    _DOMAIN: "must be a bare host name: letters, digits, '.' and '-' (no scheme, port or path)",
    _ABSOLUTE_URI: "must be an absolute URI without spaces, such as https://brand.example/rar/order "
    "(RFC 9396 §2 type)",
}
"""Each ``pattern`` of :data:`SCHEMA` in words: an operator reads the rule, not a regular expression."""


def _meant(name: object, known: Sequence[str]) -> str | None:
    """The known setting an unknown key most likely misspells, if one is close enough."""
    guesses = difflib.get_close_matches(str(name), known, n=1)
    return guesses[0] if guesses else None


def _schema_problem(error: jsonschema.ValidationError) -> Iterator[tuple[ConfigProblem, bool]]:
    """One JSON Schema violation in an operator's words (each unknown key on its own), each with
    whether to tell it: a misspelt key (``brnads:``) is one mistake, and its "did you mean" already
    names the required key it leaves missing."""
    where = list(error.absolute_path)
    if error.validator in ("additionalProperties", "required"):
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        instance = error.instance if isinstance(error.instance, Mapping) else {}
        known = list(schema.get("properties", {}))
        unknown = [name for name in instance if name not in known]
        if error.validator == "additionalProperties":
            for name in unknown:
                meant = _meant(name, known)
                hint = f"did you mean {meant}?" if meant else f"this block takes {', '.join(known)}"
                yield ConfigProblem(_yaml_path([*where, str(name)]), f"unknown setting; {hint}"), True
            return
        misspelt = {_meant(name, known) for name in unknown}
        for name in schema.get("required", []):
            if name not in instance:
                yield ConfigProblem(_yaml_path([*where, name]), "is required"), name not in misspelt
    elif error.validator == "pattern":
        pattern = str(error.validator_value)
        rule = _PATTERN_RULES.get(pattern, f"must match {pattern}")
        key = "propertyNames" in error.schema_path
        yield ConfigProblem(_yaml_path(where), f"key {error.instance!r} {rule}" if key else rule), True
    elif not where and error.validator == "type":
        yield (
            ConfigProblem(
                "(top level)", "must be a mapping of settings (public_url:, provider:, brands:, …)"
            ),
            True,
        )
    else:
        yield ConfigProblem(_yaml_path(where), error.message), True


_PATH_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def _position(raw: Any, path: str) -> tuple[int, ...]:
    """Where ``path`` sits in the document (a parsed YAML mapping keeps its order), to list problems
    top to bottom; a key that is missing sorts after its present siblings."""
    position: list[int] = []
    node = raw
    for index, key in _PATH_PART.findall(path):
        if index:
            position.append(int(index))
            node = node[int(index)] if isinstance(node, list) and int(index) < len(node) else None
        elif isinstance(node, dict):
            keys = list(node)
            position.append(keys.index(key) if key in node else len(keys))
            node = node.get(key)
        else:
            position.append(0)
            node = None
    return tuple(position)


class _Problems:
    """The problems found so far in one document, and which of its parts are too malformed to check.

    The semantic rules run only on parts the schema found well-formed: a rule reading a value of
    the wrong shape would only repeat the schema's problem, or fail in a way that says nothing.
    """

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        validator = jsonschema.Draft202012Validator(SCHEMA)
        schema = dict(pair for error in validator.iter_errors(raw) for pair in _schema_problem(error))
        self._malformed = list(schema)
        self.found = [problem for problem, told in schema.items() if told]

    def broken(self, path: str) -> bool:
        """The value at ``path`` itself may be of the wrong shape: a problem is there or above it."""
        return any(
            path == bad.path or path.startswith((f"{bad.path}.", f"{bad.path}[")) for bad in self._malformed
        )

    def touched(self, path: str) -> bool:
        """A problem is at, above or anywhere under ``path``."""
        return self.broken(path) or any(
            bad.path.startswith((f"{path}.", f"{path}[")) for bad in self._malformed
        )

    def attempt(
        self, path: str, build: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> _T | None:
        """``build(*args, **kwargs)``; ``None`` when it found a problem (noted), or was not run on a
        malformed ``path``."""
        if self.touched(path):
            return None
        try:
            return build(*args, **kwargs)
        except ConfigError as error:
            self.found.extend(error.problems)
            return None

    def note(self, path: str, reason: str) -> None:
        self.found.append(ConfigProblem(path, reason))

    def error(self) -> ConfigError:
        """Every problem found, top to bottom as in the document."""
        return ConfigError.of(sorted(self.found, key=lambda problem: _position(self._raw, problem.path)))


class _Environment(Mapping[str, str]):
    """Where ``${NAME}`` references are read from.

    ``serve`` needs every name set (``require``). ``check-config`` does not: a file is often checked
    where none of its secrets are. There a name that is not set is noted in ``unset`` and its
    reference kept as written, and what only its value could be checked against is left unchecked.
    """

    def __init__(self, environ: Mapping[str, str], *, require: bool) -> None:
        self._environ = environ
        self.require = require
        self.unset: set[str] = set()

    def __getitem__(self, name: str) -> str:
        return self._environ[name]

    def __contains__(self, name: object) -> bool:
        return name in self._environ

    def __iter__(self) -> Iterator[str]:
        return iter(self._environ)

    def __len__(self) -> int:
        return len(self._environ)

    def deferred(self, value: str) -> bool:
        """``value`` names a variable that is not set, and this check does not need it."""
        return not self.require and any(name not in self._environ for name in _ENV_REF.findall(value))


def _expand_env(value: str, path: str, environ: Mapping[str, str]) -> str:
    def repl(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in environ:
            return environ[name]
        if isinstance(environ, _Environment) and not environ.require:
            environ.unset.add(name)
            return match.group(0)
        raise ConfigError(path, f"environment variable {name} is not set")

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


# RFC 9110 §5.1 field names are tokens; §5.5 field values are visible characters, spaces and tabs. A CR or LF
# would let a header value start another header (or be refused by aiohttp on every call), so both are
# refused at load, where the YAML path can be named, rather than failing each turn of the Brand.
_FIELD_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_FIELD_VALUE_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Fields the bot client writes or that steer the connection rather than the call: a second ``Host``
# (RFC 9110 §7.2, RFC 9112 §3.2: a request with two is invalid) or a ``Content-Length`` or
# ``Transfer-Encoding`` beside the client's own (RFC 9112 §6.1, §6.3: two framings, request smuggling
# toward a proxy in front of the bot), and the hop-by-hop fields of RFC 9110 §7.6.1 (``Connection``,
# ``Proxy-Connection``, ``Keep-Alive``, ``TE``, ``Upgrade``) and ``Trailer`` (§6.6.2: the client sends
# no trailers), which would change how the client's connection behaves, not what the bot is told.
_CONNECTION_FIELDS = frozenset(
    (
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "proxy-connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
    )
)


def _header(name: str, value: str, path: str) -> str:
    """A static bot header's value, checked after ``${NAME}`` expansion (a secret may carry the newline);
    the message never quotes the value, which is typically a credential."""
    if not _FIELD_NAME.fullmatch(name):
        raise ConfigError(path, "is not a valid header name (RFC 9110 §5.1: a token, no spaces)")
    if name.lower() in _CONNECTION_FIELDS:
        raise ConfigError(
            path,
            "is a framing or hop-by-hop field, the bot client's own (RFC 9112 §6, RFC 9110 §7.6.1)",
        )
    if _FIELD_VALUE_FORBIDDEN.search(value):
        raise ConfigError(path, "contains a control character (CR, LF, NUL...); a header value is one line")
    return value


def _check_bot_url(url: str, path: str) -> str:
    """A URL the gateway calls a bot at: a host to connect to, and no credentials in it. The bot
    client sends none from a URL (gateway/upstream/client.py), and a password in the file would
    break the rule that secrets come only from the environment: ``headers`` take ``${NAME}``."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ConfigError(path, "must name a host")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(path, "must not carry credentials: send them in upstream.headers from ${NAME}")
    return url


def _upstream(raw: Mapping[str, Any], path: str, environ: Mapping[str, str]) -> UpstreamConfig:
    """The Brand's bot: the common settings, and the chosen adapter's own block (no other's)."""
    adapter: AdapterName = raw.get("adapter", "pact")
    for name in ADAPTERS:
        if name in raw and name != adapter:
            raise ConfigError(
                f"{path}.{name}", f"is the {name} adapter's settings, but upstream.adapter is {adapter}"
            )
    headers = {
        name: _header(name, _expand_env(value, f"{path}.headers.{name}", environ), f"{path}.headers.{name}")
        for name, value in raw.get("headers", {}).items()
    }
    timeout = float(raw.get("timeout", 10.0))
    return UpstreamConfig(
        url=_check_bot_url(raw["url"], f"{path}.url"),
        timeout=timeout,
        headers=headers,
        max_concurrency=raw.get("max_concurrency", MAX_CONCURRENCY),
        queue_timeout=float(raw.get("queue_timeout", 1.0)),
        circuit_breaker=CircuitBreakerConfig(**raw.get("circuit_breaker", {})),
        adapter=adapter,
        rasa=RasaSettings(**raw.get("rasa", {})) if adapter == "rasa" else None,
        http=_http_mapping(raw.get("http"), f"{path}.http", environ) if adapter == "http" else None,
        openai=_openai(raw.get("openai"), f"{path}.openai", environ) if adapter == "openai" else None,
        directline=_directline(raw.get("directline"), f"{path}.directline", timeout, environ)
        if adapter == "directline"
        else None,
    )


HTTP_PLACEHOLDERS: frozenset[str] = frozenset(
    (
        "brand",
        "conversation_id",
        "message_id",
        "text",
        "pa_issuer",
        "sub",
        "user_hash",
        "new_conversation",
        "request_id",
        "delegation_user",
        "delegation_scopes",
        "delegation_grant_id",
        "delegation_authorization_details",
    )
)
"""The names ``upstream.http.body`` may put between ``{{`` and ``}}`` (gateway/upstream/http_mapping.py)."""
HTTP_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_]+)\s*\}\}")


def _http_body(template: Any, path: str, environ: Mapping[str, str]) -> Any:
    """The body template with ``${ENV}`` expanded and every placeholder checked, at its YAML path."""
    if isinstance(template, str):
        for name in HTTP_PLACEHOLDER.findall(template):
            if name not in HTTP_PLACEHOLDERS:
                raise ConfigError(path, f"unknown placeholder {{{{{name}}}}}")
        return _expand_env(template, path, environ)
    if isinstance(template, list):
        return [_http_body(item, f"{path}[{index}]", environ) for index, item in enumerate(template)]
    if isinstance(template, dict):
        return {key: _http_body(value, f"{path}.{key}", environ) for key, value in template.items()}
    return template


def _http_mapping(
    raw: Mapping[str, Any] | None, path: str, environ: Mapping[str, str]
) -> HttpMappingSettings:
    if raw is None:
        raise ConfigError(path, "is required by adapter http")
    reply = raw["reply"]
    if ("text" in reply) == ("texts" in reply):
        raise ConfigError(f"{path}.reply.text", "give exactly one of text and texts")
    for name, expression in reply.items():
        try:
            jmespath.compile(expression)
        except jmespath.exceptions.JMESPathError as exc:
            raise ConfigError(f"{path}.reply.{name}", f"is not a JMESPath expression: {exc}") from None
    return HttpMappingSettings(
        body=_http_body(raw["body"], f"{path}.body", environ),
        reply=HttpReplyPaths(**reply),
        method=raw.get("method", "POST"),
        probe_url=None if "probe_url" not in raw else _check_bot_url(raw["probe_url"], f"{path}.probe_url"),
    )


def _secret(value: str, path: str, environ: Mapping[str, str]) -> str:
    """A bot's credential: only ever ``${NAME}``, so the key itself never sits in the file."""
    return _expand_env(_env_reference(value, path), path, environ)


_OPENAI_READ = frozenset(("system_prompt", "system_prompt_file", "api_key"))
"""``upstream.openai`` settings read rather than passed through as they are."""


def _openai(raw: Mapping[str, Any] | None, path: str, environ: Mapping[str, str]) -> OpenAISettings:
    if raw is None:
        raise ConfigError(path, "is required by adapter openai")
    prompt = raw.get("system_prompt")
    if "system_prompt_file" in raw:
        where = f"{path}.system_prompt_file"
        if prompt is not None:
            raise ConfigError(where, "give at most one of system_prompt and system_prompt_file")
        try:
            prompt = Path(raw["system_prompt_file"]).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(where, f"cannot read {raw['system_prompt_file']}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ConfigError(where, "is not UTF-8 text") from None
        if not prompt.strip():
            raise ConfigError(where, "is empty")
    key = raw.get("api_key")
    rest = {name: value for name, value in raw.items() if name not in _OPENAI_READ}
    return OpenAISettings(
        system_prompt=prompt,
        api_key=None if key is None else _secret(key, f"{path}.api_key", environ),
        **rest,
    )


def _directline(
    raw: Mapping[str, Any] | None, path: str, timeout: float, environ: Mapping[str, str]
) -> DirectLineSettings:
    if raw is None:
        raise ConfigError(path, "is required by adapter directline")
    rest = {name: value for name, value in raw.items() if name != "secret"}
    settings = DirectLineSettings(secret=_secret(raw["secret"], f"{path}.secret", environ), **rest)
    if settings.quiet_period >= timeout:
        # An answer with no inputHint could then never complete before the turn times out.
        raise ConfigError(f"{path}.quiet_period", "must be shorter than upstream.timeout")
    return settings


def _listen(raw: Mapping[str, Any]) -> ListenConfig:
    """The public listener; each ``trusted_proxies`` entry an address or a network in CIDR notation."""
    networks: list[IPv4Network | IPv6Network] = []
    problems: list[ConfigProblem] = []
    for index, entry in enumerate(raw.get("trusted_proxies", [])):
        try:
            networks.append(ip_network(entry, strict=True))
        except ValueError as exc:
            problems.append(
                ConfigProblem(
                    f"listen.trusted_proxies[{index}]",
                    f"must be an IP address or a network in CIDR notation (10.0.0.0/8, fd00::/8): {exc}",
                )
            )
    if problems:
        raise ConfigError.of(problems)
    return ListenConfig(
        host=raw.get("host", "0.0.0.0"),  # noqa: S104
        port=raw.get("port", 8080),
        trusted_proxies=tuple(networks),
        forwarded_header=raw.get("forwarded_header", "X-Forwarded-For"),
        backlog=raw.get("backlog", 4096),
        ipv6_prefix=raw.get("ipv6_prefix", 64),
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


def _env_reference(value: str, path: str) -> str:
    """``value``, which must be exactly one ``${NAME}``: a bearer secret is never written in the file."""
    if not _ENV_REF.fullmatch(value):
        raise ConfigError(path, "must be an environment variable reference ${NAME}, never the secret itself")
    return value


def _bearer_secret(reference: str, path: str, environ: Mapping[str, str]) -> str:
    """The value of the ``${NAME}`` ``reference`` to a secret a client presents as ``Authorization:
    Bearer`` (the admin token, a Brand's introspection secret): too long to guess, once it is known
    (``check-config`` without the variable set leaves it unchecked)."""
    value = _expand_env(reference, path, environ)
    deferred = isinstance(environ, _Environment) and environ.deferred(reference)
    if not deferred and len(value) < ADMIN_TOKEN_MIN:
        raise ConfigError(path, f"must be at least {ADMIN_TOKEN_MIN} characters (e.g. openssl rand -hex 32)")
    return value


def _admin(
    raw: Mapping[str, Any], listen: Mapping[str, Any], metrics: Mapping[str, Any], environ: _Environment
) -> AdminConfig:
    """The operator API: its token only ever ``${NAME}``, needed once enabled (and only then read, so a
    file may name it while the API stays off), too long to guess, and a listener of its own that
    shares no port with the A2A or ops listener."""
    token = raw.get("token")
    if token is not None:
        _env_reference(token, "admin.token")
    defaults = AdminConfig()
    where = {"host": raw.get("host", defaults.host), "port": raw.get("port", defaults.port)}
    if not raw.get("enabled", False):
        return AdminConfig(**where)
    if token is None:
        raise ConfigError("admin.token", "is required when admin.enabled is true: write ${NAME}")
    others: list[tuple[str, Mapping[str, Any], ListenConfig | MetricsConfig]] = [
        ("listen", listen, ListenConfig())
    ]
    if metrics.get("enabled", True) is not False:
        others.append(("metrics", metrics, MetricsConfig()))
    for name, other, default in others:
        host, port = other.get("host", default.host), other.get("port", default.port)
        if port == where["port"] != 0 and _hosts_overlap(host, where["host"]):
            raise ConfigError(
                "admin.port", f"is {name}.port on the same address ({host}:{port}): choose another"
            )
    return AdminConfig(enabled=True, token=_bearer_secret(token, "admin.token", environ), **where)


_WILDCARDS = frozenset(("0.0.0.0", "::", ""))  # noqa: S104 - compared, never bound


def _bound_addresses(host: str) -> frozenset[str] | None:
    """The addresses a listener on ``host`` binds: ``None`` for every address (a wildcard); an IP
    literal's own; a name's, as it resolves here (``localhost``: 127.0.0.1 and ::1, all of which
    the listener binds); a name that does not resolve, itself (it can only clash with itself)."""
    if host in _WILDCARDS:
        return None
    try:
        return frozenset((str(ipaddress.ip_address(host)),))
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return frozenset((host,))
    return frozenset(str(ipaddress.ip_address(str(info[4][0]).partition("%")[0])) for info in found)


def _hosts_overlap(one: str, other: str) -> bool:
    """Whether two listeners' hosts can clash on one port: either binds every address, or they share
    one, names resolved (issue 28 I5: ``localhost`` beside ``127.0.0.1`` passed as two hosts)."""
    first, second = _bound_addresses(one), _bound_addresses(other)
    return first is None or second is None or bool(first & second)


def _loopback_only(host: str) -> bool:
    """Whether a listener on ``host`` is reachable from this machine only."""
    addresses = _bound_addresses(host)
    if addresses is None:
        return False
    try:
        return all(ipaddress.ip_address(address).is_loopback for address in addresses)
    except ValueError:  # a name that did not resolve: nothing says it is local
        return False


def config_warnings(config: GatewayConfig) -> tuple[str, ...]:
    """What is allowed but most likely a mistake, for ``check-config`` to print and ``serve`` to log.

    An admin API on a non-loopback host (issue 28 I5): it lists and erases any person's
    conversations, and is then guarded by its token alone from every machine that reaches the host.
    """
    admin = config.admin
    if not admin.enabled or _loopback_only(admin.host):
        return ()
    return (
        f"admin.host: {admin.host or '(every address)'} is not a loopback address, so the admin API"
        " (a person's conversations, and their erasure) is reachable from other machines with its"
        " token alone; bind 127.0.0.1 and reach it through kubectl port-forward or an SSH tunnel",
    )


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


def _yaml_trouble(exc: yaml.YAMLError) -> str:
    """PyYAML's account of a syntax error: where, what, and what it was reading."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return f"not valid YAML: {exc}"
    mark = exc.problem_mark
    reason = f"not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    if exc.context is not None:
        since = exc.context_mark
        start = f" from line {since.line + 1}, column {since.column + 1}" if since is not None else ""
        reason += f" ({exc.context}{start})"
    if "'\\t'" in (exc.problem or ""):
        reason += "; YAML indents with spaces, never tabs"
    return reason


def read_config_document(source: str | os.PathLike[str] | Traversable) -> Any:
    """The parsed YAML of a configuration file, checked for nothing but being readable YAML
    with something in it; any failure is a :class:`ConfigError` (with an empty ``path``)."""
    file = source if isinstance(source, Traversable) else Path(source)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read the file: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError("", "the file is not UTF-8 text") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("", _yaml_trouble(exc)) from None
    if raw is None:
        raise ConfigError("", "the file is empty" if not text.strip() else "the file holds only comments")
    return raw


CHART_CONFIG_KEY = "config.yaml"
"""The key of the Helm chart's ConfigMap that holds the gateway's config.yaml."""


def config_document_from_stream(text: str) -> Any:
    """The gateway YAML in ``text``: the file itself, or what ``helm template`` renders.

    ``helm template … | pact-gateway check-config -`` checks a release's config before rollout,
    when no pod exists yet to check it in. A stream holding Kubernetes manifests is read for the
    one ConfigMap carrying ``data["config.yaml"]`` (the chart's); anything else is the gateway
    YAML itself. Failures are a :class:`ConfigError` with an empty ``path``, as for a file.
    """
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise ConfigError("", _yaml_trouble(exc)) from None
    if not documents:
        raise ConfigError("", "the input is empty" if not text.strip() else "the input holds only comments")
    manifests = [doc for doc in documents if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc]
    if not manifests:
        if len(documents) > 1:
            raise ConfigError("", f"the input holds {len(documents)} YAML documents; a config is one")
        return documents[0]
    carried = [
        doc["data"][CHART_CONFIG_KEY]
        for doc in manifests
        if doc["kind"] == "ConfigMap"
        and isinstance(doc.get("data"), dict)
        and isinstance(doc["data"].get(CHART_CONFIG_KEY), str)
    ]
    if len(carried) != 1:
        found = "no ConfigMap" if not carried else f"{len(carried)} ConfigMaps"
        raise ConfigError(
            "",
            f"the input holds Kubernetes manifests but {found} with data[{CHART_CONFIG_KEY!r}];"
            " render one release of the pact-gateway chart"
            " (helm template … --show-only templates/configmap.yaml)",
        )
    return config_document_from_stream(carried[0])


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
