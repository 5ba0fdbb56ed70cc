"""One request to a vendor bot API that answers JSON (OpenAI-compatible, Direct Line), over
:func:`gateway.upstream.wire.exchange`.

What a status means is each API's own business, so every status comes back with the parsed
body, or ``None`` for a body that is empty or not JSON (a proxy's error page), and the
``Retry-After`` a ``429`` carries.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

import orjson

from gateway.upstream.client import BotClient, Target
from gateway.upstream.wire import exchange, loads_reply

__all__ = ["JsonAnswer", "error_label", "request_json", "status_detail"]

_LABEL: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class JsonAnswer(NamedTuple):
    status: int
    doc: Any
    """The parsed JSON body; ``None`` when the body is empty or not JSON."""
    retry_after: str | None
    """The ``Retry-After`` header, for a ``429``."""


async def request_json(
    client: BotClient,
    method: str,
    url: str | Target,
    *,
    headers: Mapping[str, str],
    within: float,
    body: bytes | None = None,
) -> JsonAnswer:
    reply = await exchange(client, method, url, headers=headers, within=within, body=body)
    try:
        doc = loads_reply(reply.body) if reply.body else None
    except orjson.JSONDecodeError:
        doc = None
    return JsonAnswer(reply.status, doc, reply.headers.get("retry-after"))


def error_label(doc: Any, status: int | None = None) -> str:
    """The ``code`` (else ``type``) of an ``{"error": {...}}`` body, for the log; never its ``message``.

    OpenAI's error object and Bot Framework's ErrorResponse both have this shape. A message can
    echo what the User wrote; a code is a short identifier, kept only if it looks like one. A code
    that only repeats the HTTP ``status`` (LiteLLM sends ``"code": "400"`` with a 400) says nothing
    the status does not: the ``type`` is taken instead, if there is one.
    """
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict):
        return ""
    for name in ("code", "type"):
        value = error.get(name)
        if isinstance(value, str) and _LABEL.fullmatch(value) and value != str(status):
            return value
    return ""


def status_detail(status: int, doc: Any) -> str:
    """A failed status for the log: ``HTTP 400``, and the server's own error code named as such when it
    sent one (``HTTP 429, error code insufficient_quota``): two bare numbers side by side read as one,
    and a code that is the status again is not said twice."""
    code = error_label(doc, status)
    return f"HTTP {status}, error code {code}" if code else f"HTTP {status}"
