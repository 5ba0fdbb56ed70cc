"""A Brand's ``upstream``: the bot it calls, the static headers sent with each call, and the chosen
adapter's own block (``rasa``, ``http``, ``openai``, ``directline``), checked and built.

A module of its own because its rules are the bot's, not the rest of the file's: RFC 9110 header
fields, credentials only from ``${NAME}``, a home-grown bot's JMESPath and body template
(gateway/upstream/http_mapping.py reads :data:`HTTP_PLACEHOLDER` from here), and a system prompt
read from a file. :mod:`gateway.config.build` calls :func:`_upstream` once per Brand.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jmespath

from gateway.config.environment import _expand_env, _secret
from gateway.config.errors import ConfigError
from gateway.config.model import (
    ADAPTERS,
    MAX_CONCURRENCY,
    AdapterName,
    CircuitBreakerConfig,
    DirectLineSettings,
    HttpMappingSettings,
    HttpReplyPaths,
    OpenAISettings,
    RasaSettings,
    UpstreamConfig,
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
