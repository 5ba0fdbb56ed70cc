"""The gateway's native bot contract: one JSON POST per turn, one JSON answer.

Request body: ``brand``, ``conversation_id``, ``message_id``, ``text``, ``user``
(``{"pa": issuer, "sub": sub}``) and ``new_conversation``; headers are the Brand's static
ones plus ``X-Request-Id``. Answer: ``{"text": "...", "end": false}``; ``end: true`` closes
the conversation after this reply. Anything else is an :class:`UpstreamError`.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
import orjson

from gateway.config import UpstreamConfig
from gateway.upstream.base import BotReply, Turn, UpstreamError

MAX_REPLY_BYTES = 1024 * 1024


class HttpJsonAdapter:
    def __init__(self, upstream: UpstreamConfig, session: aiohttp.ClientSession) -> None:
        self._url = upstream.url
        self._timeout = aiohttp.ClientTimeout(total=upstream.timeout)
        self._headers: Mapping[str, str] = {"Content-Type": "application/json", **upstream.headers}
        self._session = session

    async def send(self, turn: Turn) -> BotReply:
        body = orjson.dumps(
            {
                "brand": turn.brand_id,
                "conversation_id": turn.conversation_id,
                "message_id": turn.message_id,
                "text": turn.text,
                "user": {"pa": turn.pa_issuer, "sub": turn.sub},
                "new_conversation": turn.new_conversation,
            }
        )
        headers = {**self._headers, "X-Request-Id": turn.request_id}
        try:
            async with self._session.post(
                self._url, data=body, headers=headers, timeout=self._timeout, allow_redirects=False
            ) as response:
                if not 200 <= response.status < 300:
                    raise UpstreamError("status", f"HTTP {response.status}")
                raw = await response.content.read(MAX_REPLY_BYTES + 1)
        except TimeoutError:
            raise UpstreamError("timeout", f"no answer within {self._timeout.total} s") from None
        except aiohttp.ClientConnectionError as exc:
            raise UpstreamError("connect", type(exc).__name__) from None
        except aiohttp.ClientError as exc:
            raise UpstreamError("protocol", type(exc).__name__) from None
        if len(raw) > MAX_REPLY_BYTES:
            raise UpstreamError("bad_body", "reply larger than 1 MiB")
        return parse_bot_reply(raw)


def parse_bot_reply(raw: bytes) -> BotReply:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise UpstreamError("bad_body", "not JSON") from None
    if not isinstance(doc, dict):
        raise UpstreamError("bad_body", "not a JSON object")
    text = doc.get("text")
    if not isinstance(text, str) or not text.strip():
        raise UpstreamError("bad_body", "no non-empty text")
    end = doc.get("end", False)
    if not isinstance(end, bool):
        raise UpstreamError("bad_body", "end is not a boolean")
    return BotReply(text=text, end=end)
