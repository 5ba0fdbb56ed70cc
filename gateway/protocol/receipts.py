"""§5.6 receipts: what a reply served under a delegation token says was done, and in whose name.

Pure: :func:`receipt_claims` builds the claims, :func:`receipt_payload` the exact bytes the
Provider signs (with :data:`RECEIPT_TYP` as the JWS ``typ``, see
:meth:`gateway.provider_keys.ProviderKeys.sign`), and :func:`receipt_metadata` the reply's
``metadata``. The claims object in the reply and the JWS payload are the same JSON: a personal
agent that verifies the JWS and keeps ``claims`` keeps what was signed.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

import orjson

__all__ = [
    "RECEIPT_KEY",
    "RECEIPT_TYP",
    "Action",
    "args_hash",
    "receipt_claims",
    "receipt_grant",
    "receipt_metadata",
    "receipt_payload",
    "timestamp",
]

RECEIPT_TYP: Final = "pact-receipt+jws"
"""The JWS header ``typ`` of a receipt (conformance notes, "Receipt")."""
RECEIPT_KEY: Final = "pact.receipt"
"""Where a receipt sits in the reply message's ``metadata``."""


class Action(NamedTuple):
    """One tool call the bot made on the User's account, for the §5.6 receipt.

    ``canonical_args`` is the RFC 8785 canonical JSON of the call's arguments, made while the
    reply is parsed, so a bot's arguments that cannot be canonicalized are a bad reply and the
    receipt only ever hashes bytes.
    """

    tool: str
    canonical_args: bytes | None = None
    authorization_detail: str | None = None
    """RFC 9396: the canonical JSON of the granted detail that allowed this action, when it was
    bound to a resource; the receipt names it."""


def args_hash(canonical_args: bytes) -> str:
    """``argsHash``: base64url (no padding) of SHA-256 over the RFC 8785 canonical JSON of the args.

    The bot's arguments themselves never leave the Brand: the hash lets a User who has them
    (the order number they asked to cancel) show that this receipt is about them.
    """
    return base64.urlsafe_b64encode(hashlib.sha256(canonical_args).digest()).rstrip(b"=").decode()


def timestamp(now: float) -> str:
    """RFC 3339 in UTC to the second, e.g. ``2026-09-30T12:00:00Z`` (the form §5.6 shows)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def receipt_claims(
    *,
    grant_id: str,
    user: str,
    pa: str,
    brand: str,
    scopes_used: Sequence[str],
    actions: Sequence[Action],
    ts: str,
    context_id: str,
    message_id: str,
) -> dict[str, Any]:
    """The §5.6 claims, in the spec's member order.

    ``brand`` is the Brand's interface URL (a delegation token's ``aud``), ``pa`` the personal
    agent's issuer, ``message_id`` the request's, so a receipt names the one turn it answers.
    An action carries ``argsHash`` only when the bot gave arguments, and ``authorizationDetail``
    (RFC 9396: the granted detail that allowed it, its approved bytes) only when it was bound to one.
    """
    return {
        "grantId": grant_id,
        "user": user,
        "pa": pa,
        "brand": brand,
        "scopesUsed": list(scopes_used),
        "actions": [_action(action) for action in actions],
        "ts": ts,
        "contextId": context_id,
        "messageId": message_id,
    }


def _action(action: Action) -> dict[str, Any]:
    """One ``actions`` entry of a receipt."""
    entry: dict[str, Any] = {"tool": action.tool}
    if action.canonical_args is not None:
        entry["argsHash"] = args_hash(action.canonical_args)
    if action.authorization_detail is not None:
        entry["authorizationDetail"] = orjson.Fragment(action.authorization_detail)
    return entry


def receipt_payload(claims: dict[str, Any]) -> bytes:
    """The JWS payload: exactly the claims' JSON, as the reply's ``claims`` member serializes."""
    return orjson.dumps(claims)


def receipt_metadata(jws: str, claims: dict[str, Any]) -> dict[str, Any]:
    """The reply message's ``metadata``: ``{"pact.receipt": {"jws", "claims"}}``."""
    return {RECEIPT_KEY: {"jws": jws, "claims": claims}}


def receipt_grant(reply: bytes) -> str | None:
    """The ``grantId`` of the receipt in a stored reply (:func:`gateway.protocol.messages.render_reply`'s
    bytes), or ``None`` for a reply served without delegation.

    The receipt is how a stored reply says it was served under a grant (§4.3 with §5.5): the
    grant id is already in it, signed, so nothing more is stored beside the reply to say so.
    """
    if RECEIPT_KEY.encode() not in reply:
        return None  # cheap for plain replies; a text that merely quotes the key is parsed below
    metadata = orjson.loads(reply).get("message", {}).get("metadata")
    if not isinstance(metadata, dict) or RECEIPT_KEY not in metadata:
        return None
    grant_id: str = metadata[RECEIPT_KEY]["claims"]["grantId"]
    return grant_id
