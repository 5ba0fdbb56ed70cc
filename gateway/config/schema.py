"""The JSON Schema a configuration file is checked against first (shape, types, bounds), and each of
its patterns in words.

One source for three readers: the schema pass (:mod:`gateway.config.problems`), the reference page
(scripts/gen_config_reference.py) and the Helm chart's ``values.schema.json``
(scripts/gen_chart_schema.py), so they cannot disagree on a key. Data only: no prose, no defaults
(those are the dataclasses' of :mod:`gateway.config.model`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from gateway.config.model import ADAPTERS, KEY_LAYOUTS, MAX_AGENT_NAME

_BRAND_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_HTTP_URL = r"^https?://"
_CACHE_URL = r"^(memory|redis|rediss|redis\+sentinel|redis\+cluster|rediss\+cluster)://"
_DOMAIN = r"^[A-Za-z0-9.-]+$"
_ABSOLUTE_URI = r"^[A-Za-z][A-Za-z0-9+.-]*:\S+$"
_SCHEME_NAME = r"^[A-Za-z][A-Za-z0-9_-]*$"
_HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"  # RFC 9110 §5.6.2 token


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
