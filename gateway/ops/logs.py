"""Process logging: JSON lines (python-json-logger) or text, one structured access line per request.

Structured fields travel as ``extra=`` on each call, so the JSON output and the text output
carry the same facts. What must never reach a log is kept out at the source (handlers log
reasons, not tokens; ``sub`` only as :func:`sub_digest`); :class:`RedactingFilter` is the
second line of defence for anything that looks like a compact JWS.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
from typing import Any, TextIO

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from gateway.config import LoggingConfig

__all__ = [
    "ACCESS_LOGGER",
    "AIOHTTP_ACCESS",
    "GatewayLogHandler",
    "RedactingFilter",
    "TextFormatter",
    "configure_logging",
    "sub_digest",
]

ACCESS_LOGGER = "pact_gateway.access"
AIOHTTP_ACCESS = "aiohttp.access"

# Three base64url segments, the first starting like a JSON object: a JWT, PA token or assertion.
_COMPACT_JWS = re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
_REDACTED = "[redacted]"
_STANDARD = frozenset(RESERVED_ATTRS) | {"message", "asctime", "taskName"}


def sub_digest(issuer: str, sub: str) -> str:
    """A stable, non-reversible handle for the User ``(issuer, sub)`` (§3.2) in logs.

    Hashing the pair, not ``sub`` alone, keeps the same person unlinkable across personal
    agents; 16 hex digits are plenty to follow one User through the log.
    """
    return hashlib.sha256(f"{issuer}\x00{sub}".encode()).hexdigest()[:16]


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {key: value for key, value in record.__dict__.items() if key not in _STANDARD}


class RedactingFilter(logging.Filter):
    """Replaces anything shaped like a JWT in the message or a string field with ``[redacted]``."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _COMPACT_JWS.search(message):
            record.msg, record.args = _COMPACT_JWS.sub(_REDACTED, message), None
        for key, value in _extras(record).items():
            if isinstance(value, str) and _COMPACT_JWS.search(value):
                setattr(record, key, _COMPACT_JWS.sub(_REDACTED, value))
        return True


class TextFormatter(logging.Formatter):
    """``time level logger message key=value …``: the JSON fields, for a human at a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = " ".join(f"{key}={value}" for key, value in _extras(record).items() if value is not None)
        if not fields:
            return line
        head, newline, trace = line.partition("\n")
        return f"{head} {fields}{newline}{trace}"


def _json_formatter() -> logging.Formatter:
    return JsonFormatter(
        "{levelname}{name}{message}{process}",
        style="{",
        rename_fields={"levelname": "level", "name": "logger", "process": "pid"},
        timestamp=True,
    )


class GatewayLogHandler(logging.StreamHandler[TextIO]):
    """The one handler :func:`configure_logging` installs; a second call replaces it."""


def configure_logging(config: LoggingConfig, stream: TextIO | None = None) -> None:
    """Send every log record to ``stream`` (stderr) at ``config.level``, as JSON lines or text.

    Called at start-up and again after a configuration reload, so it replaces its own
    handler rather than stacking a second one; handlers others installed are left alone.
    """
    root = logging.getLogger()
    for existing in [h for h in root.handlers if isinstance(h, GatewayLogHandler)]:
        root.removeHandler(existing)
    handler = GatewayLogHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(_json_formatter() if config.format == "json" else TextFormatter())
    handler.addFilter(RedactingFilter())
    root.addHandler(handler)
    root.setLevel(config.level)
    # The gateway writes its own access line; aiohttp's would carry the raw path and query string.
    logging.getLogger(AIOHTTP_ACCESS).setLevel(logging.WARNING)
