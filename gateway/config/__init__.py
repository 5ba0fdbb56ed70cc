"""Typed gateway configuration, loaded and validated once at start-up.

The YAML is checked in two passes: a JSON Schema for shape and types (so every error
names the YAML path of the bad value), then the semantic rules a schema cannot say
(HTTPS-only JWKS outside development, unique ids, environment variables present).
Only then is it turned into frozen dataclasses, so the rest of the gateway never sees
an unchecked value.

Both passes collect every problem rather than stopping at the first: an operator fixes a file
in one round instead of one error per run. A rule of the second pass is skipped for a part
the first pass already found malformed (it would only repeat the problem, or misread it).

A package of one module per part, each small enough to read whole; this module only re-exports
their public names, so ``from gateway.config import …`` is all a caller ever writes:

- :mod:`~gateway.config.model`: the frozen dataclasses and the names and bounds they share;
- :mod:`~gateway.config.errors`: :class:`ConfigProblem` and :class:`ConfigError`;
- :mod:`~gateway.config.schema`: the JSON Schema of the first pass, each pattern in words;
- :mod:`~gateway.config.problems`: YAML paths, "did you mean", the collector of every problem;
- :mod:`~gateway.config.environment`: ``${NAME}`` references and the secrets that are only one;
- :mod:`~gateway.config.upstream`: a Brand's bot and its adapter's settings;
- :mod:`~gateway.config.listeners`: the listeners, the admin API's port and host, its warning;
- :mod:`~gateway.config.details`: a delegating Brand's RFC 9396 authorization details types;
- :mod:`~gateway.config.build`: the second pass's rules and builders, :func:`load_config` and
  :func:`check_config`;
- :mod:`~gateway.config.document`: reading a file or a stream (``helm template``'s output).
"""

from gateway.config.build import (
    check_config,
    check_config_file,
    load_config,
    load_config_file,
)
from gateway.config.document import (
    CHART_CONFIG_KEY,
    config_document_from_stream,
    read_config_document,
)
from gateway.config.errors import (
    ConfigError,
    ConfigProblem,
)
from gateway.config.listeners import (
    config_warnings,
)
from gateway.config.model import (
    ADAPTERS,
    ADMIN_TOKEN_MIN,
    INTROSPECTION_FAILURES,
    KEY_LAYOUTS,
    MAX_AGENT_NAME,
    MAX_CONCURRENCY,
    AdapterName,
    AdminConfig,
    AuthorizationDetailType,
    BrandConfig,
    CacheConfig,
    CheckedConfig,
    CircuitBreakerConfig,
    DelegationConfig,
    DirectLineSettings,
    ForwardedHeader,
    GatewayConfig,
    HttpMappingSettings,
    HttpReplyPaths,
    JwksPolicy,
    KeyLayoutName,
    LimitsConfig,
    ListenConfig,
    LoggingConfig,
    LoginConfig,
    MetricsConfig,
    OAuthConfig,
    OpenAISettings,
    PersonalAgentConfig,
    PersonalAgentsConfig,
    ProviderConfig,
    RasaSettings,
    RateLimitsConfig,
    RateRule,
    ReloadConfig,
    SkillConfig,
    TracingConfig,
    UpstreamConfig,
)
from gateway.config.schema import (
    _PATTERN_RULES as _PATTERN_RULES,  # scripts/gen_config_reference.py words each pattern with it
)
from gateway.config.schema import (
    RATE_RULE_NAMES,
    SCHEMA,
)
from gateway.config.upstream import (
    HTTP_PLACEHOLDER,
    HTTP_PLACEHOLDERS,
)

__all__ = [
    "ADAPTERS",
    "ADMIN_TOKEN_MIN",
    "CHART_CONFIG_KEY",
    "HTTP_PLACEHOLDER",
    "HTTP_PLACEHOLDERS",
    "INTROSPECTION_FAILURES",
    "KEY_LAYOUTS",
    "MAX_AGENT_NAME",
    "MAX_CONCURRENCY",
    "RATE_RULE_NAMES",
    "SCHEMA",
    "AdapterName",
    "AdminConfig",
    "AuthorizationDetailType",
    "BrandConfig",
    "CacheConfig",
    "CheckedConfig",
    "CircuitBreakerConfig",
    "ConfigError",
    "ConfigProblem",
    "DelegationConfig",
    "DirectLineSettings",
    "ForwardedHeader",
    "GatewayConfig",
    "HttpMappingSettings",
    "HttpReplyPaths",
    "JwksPolicy",
    "KeyLayoutName",
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
