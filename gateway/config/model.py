"""The typed configuration: frozen dataclasses, the names they allow, and the defaults and bounds
other modules share (``ADAPTERS``, ``MAX_CONCURRENCY``, ``ADMIN_TOKEN_MIN``, ``KEY_LAYOUTS``).

What the rest of the gateway reads, so it imports nothing of the YAML, the schema or the checks:
a value of these classes was checked before it was made (:mod:`gateway.config.build`), and a test
or a tool may build one directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Network, IPv6Network
from typing import Any, Final, Literal, get_args
from urllib.parse import urlsplit

from gateway.provider_keys import SigningKey
from gateway.redis_url import CLUSTER_SCHEMES

_FAILOVER_SCHEMES = frozenset({"redis+sentinel", *CLUSTER_SCHEMES})
"""URL schemes whose primary a failover replaces by a replica: ``wait_replicas`` defaults to 1."""


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
