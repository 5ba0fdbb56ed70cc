"""Process logging: JSON lines (orjson) or text, one structured access line per request.

Structured fields reach a record in one of two ways, and both formatters print them alike:

* ``extra=`` on an ordinary logging call (errors, warnings, start-up): logging copies each
  field into the record, and the formatter sifts them back out of ``record.__dict__``;
* :func:`log_fields`, for the per-request access line: the fields travel as one dict on
  the record, so nothing is copied, sifted or looked up on the way to the formatter.

What must never reach a log is kept out at the source (handlers log reasons, not tokens;
``sub`` only as :func:`sub_digest`). :class:`GatewayLogHandler` is the second line of defence:
anything shaped like a compact JWS in the finished line (message, field, traceback) becomes
``[redacted]`` before it is written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import orjson

from gateway.config import LoggingConfig

__all__ = [
    "ACCESS_LOGGER",
    "AIOHTTP_ACCESS",
    "FIELDS_ATTR",
    "GatewayLogHandler",
    "JsonFormatter",
    "SubDigests",
    "TextFormatter",
    "configure_logging",
    "log_fields",
    "redact",
    "sub_digest",
]

ACCESS_LOGGER = "pact_gateway.access"
AIOHTTP_ACCESS = "aiohttp.access"

FIELDS_ATTR = "pact_fields"
"""The record attribute :func:`log_fields` puts its fields dict under."""

# Three base64url segments, the first starting like a JSON object: a JWT, PA token or assertion.
_COMPACT_JWS = re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
# Every match starts with this; a line without it cannot hold a token, so the regex is skipped.
_JWS_START = "eyJ"
_REDACTED = "[redacted]"
# Whatever a bare record carries is logging's own; anything else on a record is an ``extra=`` field.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
    FIELDS_ATTR,
}


def sub_digest(issuer: str, sub: str) -> str:
    """A stable, non-reversible handle for the User ``(issuer, sub)`` (§3.2) in logs.

    Hashing the pair, not ``sub`` alone, keeps the same person unlinkable across personal
    agents; 16 hex digits are plenty to follow one User through the log.
    """
    return hashlib.sha256(f"{issuer}\x00{sub}".encode()).hexdigest()[:16]


class SubDigests:
    """:func:`sub_digest` for the Users seen lately, so a User's turns hash their ``sub`` once.

    A personal agent reuses one token for many turns, so the same few ``(issuer, sub)`` pairs
    recur. Bounded to ``size`` entries; when full, the oldest entry goes (a miss only costs one
    hash again, so insertion order is as good as recency here, and cheaper to keep).
    """

    def __init__(self, size: int = 4096) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self._size = size
        self._digests: dict[tuple[str, str], str] = {}

    def __len__(self) -> int:
        return len(self._digests)

    def get(self, issuer: str, sub: str) -> str:
        key = (issuer, sub)
        digest = self._digests.get(key)
        if digest is None:
            digest = sub_digest(issuer, sub)
            if len(self._digests) >= self._size:
                del self._digests[next(iter(self._digests))]
            self._digests[key] = digest
        return digest


def redact(text: str) -> str:
    """``text`` with anything shaped like a compact JWS replaced by ``[redacted]``."""
    return _COMPACT_JWS.sub(_REDACTED, text) if _JWS_START in text else text


def log_fields(logger: logging.Logger, level: int, message: str, fields: dict[str, Any]) -> None:
    """Log ``message`` with ``fields`` as its structured data, by the shortest path logging has.

    What ``logger.log(level, message, extra=fields)`` prints, for a fraction of the cost: no
    caller lookup (a frame walk whose answer, the access middleware, says nothing), no copy
    of each field into the record, and the formatter takes ``fields`` as it is. ``message``
    is final text (never %-formatted); ``fields`` must not be changed after the call.
    """
    if not logger.isEnabledFor(level):
        return
    record = logger.makeRecord(logger.name, level, "", 0, message, (), None)
    record.__dict__[FIELDS_ATTR] = fields
    logger.handle(record)


def _fields(record: logging.LogRecord) -> Mapping[str, Any]:
    fields: Mapping[str, Any] | None = record.__dict__.get(FIELDS_ATTR)
    if fields is not None:
        return fields
    return {key: value for key, value in record.__dict__.items() if key not in _STANDARD}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``level``, ``logger``, ``message``, ``pid``, the fields, ``timestamp``.

    Serialized by orjson in one call; anything it cannot serialize is written as ``str()``,
    and a value even that refuses (an int beyond 64 bits) falls back to the standard library.
    """

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            payload["exc_info"] = record.exc_text
        if record.stack_info:
            payload["stack_info"] = self.formatStack(record.stack_info)
        payload.update(_fields(record))
        payload["timestamp"] = dt.datetime.fromtimestamp(record.created, dt.UTC)
        try:
            return orjson.dumps(payload, default=str).decode()
        except TypeError:  # orjson.JSONEncodeError
            return json.dumps(payload, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger message key=value …``: the JSON fields, for a human at a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = " ".join(f"{key}={value}" for key, value in _fields(record).items() if value is not None)
        if not fields:
            return line
        head, newline, trace = line.partition("\n")
        return f"{head} {fields}{newline}{trace}"


class GatewayLogHandler(logging.StreamHandler[TextIO]):
    """The one handler :func:`configure_logging` installs; a second call replaces it.

    It redacts the finished line rather than each field: one substring test per line covers
    the message, every field and any traceback, and the regex runs only when that test finds
    the start of a token (a base64url token survives JSON escaping unchanged, and
    ``[redacted]`` needs none).
    """

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def configure_logging(config: LoggingConfig, stream: TextIO | None = None) -> None:
    """Send every log record to ``stream`` (stderr) at ``config.level``, as JSON lines or text.

    Called at start-up and again after a configuration reload, so it replaces its own
    handler rather than stacking a second one; handlers others installed are left alone.
    """
    root = logging.getLogger()
    for existing in [h for h in root.handlers if isinstance(h, GatewayLogHandler)]:
        root.removeHandler(existing)
    handler = GatewayLogHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter() if config.format == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(config.level)
    # The gateway writes its own access line; aiohttp's would carry the raw path and query string.
    logging.getLogger(AIOHTTP_ACCESS).setLevel(logging.WARNING)
