"""What handling a request notes on it for its access line: why it was refused, whether it replayed.

The access line must say why a request failed without reading the body it answered (it runs
on every request, and the reason is in a JSON envelope), so whoever builds the refusal writes
the reason here: the error middleware the §6 A2A reason, the OAuth endpoints their RFC 6749
error code, the §6 limits the limit that refused, a §5.5 delegation-token check why the token
was refused. The §3.4 authentication failure is kept by :mod:`gateway.handlers.caller`, for the
metrics too. Nothing here is ever sent to the client.
"""

from __future__ import annotations

from aiohttp import web

__all__ = ["REFUSAL", "RETRY_SERVED", "refused"]

REFUSAL = web.RequestKey("refusal", str)
"""A bounded reason: ``INVALID_PARAMS`` …, ``invalid_grant`` …, ``per_user`` …, ``invalid_token:expired`` …"""
RETRY_SERVED = web.RequestKey("retry_served", bool)
"""Set by ``message:send`` once its turn answered: ``True`` when the stored reply was replayed (§4.3)."""


def refused(request: web.Request, reason: str) -> None:
    """Note ``reason`` as why ``request`` was refused; the access line prints it as ``reason``."""
    request[REFUSAL] = reason
