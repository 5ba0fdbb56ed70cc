"""An OpenAI-compatible chat completions API as a Brand's bot (OpenAI, Azure OpenAI v1, vLLM, Ollama,
LiteLLM, …): ``upstream.adapter: openai``, ``upstream.url`` the API's base URL.

Each turn is one ``POST {url}/chat/completions`` with ``Content-Type: application/json``, the key
in ``upstream.openai.api_key_header`` (``Authorization: Bearer <key>`` by default; Azure's
``api-key: <key>``), the Brand's static headers and ``X-Request-Id``::

    {"model": "<model>",
     "messages": [{"role": "system", "content": "<system prompt>"},
                  …the conversation's kept history, {"role": "user"|"assistant", "content": …}…,
                  {"role": "user", "content": "<this turn's text>"}],
     "max_tokens": <int>, "temperature": <number>}

(``system``, ``max_tokens`` and ``temperature`` only when configured). The reply is
``choices[0].message.content`` (or ``message.refusal`` when the model refused and said why). The
model holds no conversation, so the gateway keeps its history in the store
(:mod:`gateway.store.adapter_state`), bounded by ``max_history_turns`` user/assistant pairs and
``max_history_chars``, the oldest pair dropped first, for ``cache.conversation_ttl`` after the
last turn. A pair is kept only once its reply is in hand: a failed turn leaves the history as it
was, so the personal agent's retry (§4.3) sends the model exactly what the failed call did.

Failures are :class:`UpstreamError` with a bounded reason (logged with the provider's error
``code``, never its message): ``auth`` (401, 403), ``quota`` (429 ``insufficient_quota``: money,
not traffic), ``status`` (any other non-2xx), ``provider_error`` (an ``error`` object, even with
200), ``content_filter`` (``finish_reason: content_filter``), ``empty`` (no text), ``bad_body``.
A plain ``429`` is :class:`UpstreamThrottled` with its ``Retry-After``, which the guard honours.

These turns are §3 turns: the model never acts on a Brand user's account, so no §5 fields.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import orjson

from gateway.config import CacheConfig, OpenAISettings, UpstreamConfig
from gateway.ops.tracing import trace_headers
from gateway.store import keys
from gateway.store.adapter_state import AdapterState
from gateway.store.base import StoreError
from gateway.upstream.base import BotReply, Turn, UpstreamError, UpstreamThrottled, retry_after_seconds
from gateway.upstream.client import BotClient, Target
from gateway.upstream.json_call import JsonAnswer, error_label, request_json, status_detail
from gateway.wire import json_bytes

__all__ = ["Message", "OpenAIAdapter", "completion_text", "load_history", "trim_history"]

STATE_NAME: Final = "openai"
_ROLES: Final = frozenset(("user", "assistant"))

Message = dict[str, str]
"""One chat message as the API takes it: ``{"role": …, "content": …}``."""


class OpenAIAdapter:
    def __init__(
        self,
        upstream: UpstreamConfig,
        client: BotClient,
        state: AdapterState,
        *,
        cache: CacheConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        settings = upstream.openai
        if settings is None:
            raise ValueError("the openai adapter needs upstream.openai")
        self._settings = settings
        base = upstream.url.rstrip("/")
        self._completions_url = Target.parse(f"{base}/chat/completions")  # split once, not every turn
        self._models_url = f"{base}/models"
        self._headers = {**upstream.headers, **_auth_header(settings)}
        self._timeout = upstream.timeout
        self._client = client
        self._state = state
        self._ttl = cache.conversation_ttl
        self._clock = clock
        self._system: list[Message] = (
            [] if settings.system_prompt is None else [{"role": "system", "content": settings.system_prompt}]
        )
        self._options: dict[str, Any] = {"model": settings.model}
        if settings.max_tokens is not None:
            self._options["max_tokens"] = settings.max_tokens
        if settings.temperature is not None:
            self._options["temperature"] = settings.temperature

    async def send(self, turn: Turn) -> BotReply:
        key = keys.adapter_key(turn.brand_id, turn.conversation_id, STATE_NAME)
        keeps_history = self._settings.max_history_turns > 0
        # A new conversation has no history yet: skip the store's round trip.
        history = await self._history(key) if keeps_history and not turn.new_conversation else []
        asked: Message = {"role": "user", "content": turn.text}
        body = json_bytes({**self._options, "messages": [*self._system, *history, asked]})
        headers = {
            **self._headers,
            "Content-Type": "application/json",
            "X-Request-Id": turn.request_id,
            **trace_headers(turn.trace),
        }
        answer = await self._call("POST", self._completions_url, headers, body)
        text = completion_text(answer, now=self._clock())
        if keeps_history:
            kept = trim_history(
                [*history, asked, {"role": "assistant", "content": text}],
                max_turns=self._settings.max_history_turns,
                max_chars=self._settings.max_history_chars,
            )
            try:
                await self._state.put(key, json_bytes(kept), self._ttl)
            except StoreError as exc:
                raise UpstreamError("store", f"history not saved: {exc}") from None
        return BotReply(text)

    async def probe(self) -> str:
        """``GET {url}/models`` (lists models, changes nothing): is the configured model among them?"""
        answer = await self._call("GET", self._models_url, self._headers, None)
        _check_status(answer, now=self._clock())
        data = answer.doc.get("data") if isinstance(answer.doc, dict) else None
        if not isinstance(data, list):
            raise UpstreamError("bad_body", "no model list")
        ids = {item.get("id") for item in data if isinstance(item, dict)}
        model = self._settings.model
        if model not in ids:
            # Every turn would fail (the server answers 404 model_not_found or 400), so the probe fails too.
            raise UpstreamError("model", f"{model!r} is not among the server's {len(data)} models")
        return f"OpenAI-compatible API, {len(data)} models; {model!r} is listed"

    async def _history(self, key: str) -> list[Message]:
        try:
            raw = await self._state.get(key)
        except StoreError as exc:
            raise UpstreamError("store", f"history not read: {exc}") from None
        return [] if raw is None else load_history(raw)

    async def _call(
        self, method: str, url: str | Target, headers: dict[str, str], body: bytes | None
    ) -> JsonAnswer:
        return await request_json(self._client, method, url, headers=headers, within=self._timeout, body=body)


def _auth_header(settings: OpenAISettings) -> dict[str, str]:
    if settings.api_key is None:
        return {}  # a local model server with no key (Ollama, vLLM without --api-key)
    if settings.api_key_header.lower() == "authorization":
        return {"Authorization": f"Bearer {settings.api_key}"}
    return {settings.api_key_header: settings.api_key}


def _check_status(answer: JsonAnswer, *, now: float) -> None:
    status = answer.status
    if 200 <= status < 300:
        return
    code = error_label(answer.doc)
    detail = status_detail(status, answer.doc)
    if status == 429:
        if code == "insufficient_quota":
            raise UpstreamError("quota", detail)
        raise UpstreamThrottled(retry_after_seconds(answer.retry_after, now), detail)
    raise UpstreamError("auth" if status in (401, 403) else "status", detail)


def completion_text(answer: JsonAnswer, *, now: float) -> str:
    """The reply text of a chat completion answer, or the bounded failure it is.

    ``now`` (wall-clock seconds) turns an HTTP-date ``Retry-After`` into a wait.
    """
    _check_status(answer, now=now)
    doc = answer.doc
    if not isinstance(doc, dict):
        raise UpstreamError("bad_body", "not a JSON object")
    if doc.get("error") is not None:
        raise UpstreamError("provider_error", error_label(doc) or "error object")
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UpstreamError("bad_body", "no choices")
    choice = choices[0]
    if choice.get("finish_reason") == "content_filter":
        raise UpstreamError("content_filter", "finish_reason content_filter")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise UpstreamError("bad_body", "choices[0] has no message")
    for name in ("content", "refusal"):
        text = message.get(name)
        if isinstance(text, str) and text.strip():
            return text
    raise UpstreamError("empty", "no message content")


def load_history(raw: bytes) -> list[Message]:
    """The kept history, or none if what is stored is not one (it was written by this module only)."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(doc, list) or not all(_is_message(item) for item in doc):
        return []
    return doc


def _is_message(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.keys() == {"role", "content"}
        and item["role"] in _ROLES
        and isinstance(item["content"], str)
    )


def trim_history(messages: Sequence[Message], *, max_turns: int, max_chars: int) -> list[Message]:
    """``messages`` (user/assistant pairs) without their oldest pairs, until at most ``max_turns``
    pairs of at most ``max_chars`` characters together remain.

    Whole pairs go, so the model never sees an answer without its question.
    """
    pairs = [list(messages[index : index + 2]) for index in range(0, len(messages) - 1, 2)]
    chars = sum(len(message["content"]) for pair in pairs for message in pair)
    start = 0
    while start < len(pairs) and (len(pairs) - start > max_turns or chars > max_chars):
        chars -= sum(len(message["content"]) for message in pairs[start])
        start += 1
    return [message for pair in pairs[start:] for message in pair]
