"""§5.5 step-up: the ``TASK_STATE_AUTH_REQUIRED`` task a turn answers when it needs scopes not granted.

Pure rendering; the device authorization it names is started by the caller
(:func:`gateway.oauth.device.start_device_authorization`). The task is ephemeral (§5.5 allows
``tasks/{id}`` to be ``TASK_NOT_FOUND`` for it): nothing stores it, and the conversation stays
open so the personal agent re-sends on the same ``contextId`` with the new token.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from gateway.protocol.authorization_details import details_json
from gateway.wire import json_bytes

__all__ = ["new_task_id", "render_step_up"]


def new_task_id() -> str:
    """``t-`` and 32 hex digits: names an ephemeral task that grants nothing, so no CSPRNG is needed."""
    return f"t-{random.getrandbits(128):032x}"


def render_step_up(
    *,
    task_id: str,
    reply_id: str,
    context_id: str,
    text: str,
    missing_scopes: Sequence[str],
    verification_uri_complete: str,
    device_code: str,
    user_code: str,
    interval: int,
    expires_in: int,
    authorization_details: Sequence[str] = (),
) -> bytes:
    """The ``{"task": …}`` answer, serialized once.

    ``metadata`` carries the spec's ``pact.missingScopes`` (card order) and
    ``pact.verificationUriComplete``, plus the rest of the RFC 8628 answer (``deviceCode``,
    ``userCode``, ``interval``, ``expiresIn``), so the personal agent polls the token endpoint
    for this authorization without asking for another one. ``authorization_details`` (canonical
    JSON each) are the RFC 9396 details the authorization asks, as ``pact.authorizationDetails``
    (objects, the bytes asked); the member is left out when it asks none.
    """
    metadata: dict[str, object] = {
        "pact.missingScopes": list(missing_scopes),
        "pact.verificationUriComplete": verification_uri_complete,
        "pact.deviceCode": device_code,
        "pact.userCode": user_code,
        "pact.interval": interval,
        "pact.expiresIn": expires_in,
    }
    if authorization_details:
        metadata["pact.authorizationDetails"] = details_json(authorization_details)
    return json_bytes(
        {
            "task": {
                "id": task_id,
                "contextId": context_id,
                "status": {
                    "state": "TASK_STATE_AUTH_REQUIRED",
                    "message": {"messageId": reply_id, "role": "ROLE_AGENT", "parts": [{"text": text}]},
                },
                "metadata": metadata,
            }
        }
    )
