"""§6 error envelopes: A2A / AIP-193 errors with the reason in ``error.details[0].reason``."""

from __future__ import annotations

from enum import Enum
from typing import Any

from gateway.wire import json_bytes

A2A_CONTENT_TYPE = "application/a2a+json"


class Reason(Enum):
    """The §6 reasons. Values are the names: two reasons share a status pair, and Enum would alias them."""

    INVALID_PARAMS = "INVALID_PARAMS"
    CONTENT_TYPE_NOT_SUPPORTED = "CONTENT_TYPE_NOT_SUPPORTED"
    UNSUPPORTED_OPERATION = "UNSUPPORTED_OPERATION"
    PUSH_NOTIFICATION_NOT_SUPPORTED = "PUSH_NOTIFICATION_NOT_SUPPORTED"
    TASK_NOT_FOUND = "TASK_NOT_FOUND"
    INTERNAL = "INTERNAL"

    @property
    def http_status(self) -> int:
        return _STATUS[self][0]

    @property
    def status(self) -> str:
        return _STATUS[self][1]


# §6 table: HTTP status and AIP-193 `status` per reason.
_STATUS: dict[Reason, tuple[int, str]] = {
    Reason.INVALID_PARAMS: (400, "INVALID_ARGUMENT"),
    Reason.CONTENT_TYPE_NOT_SUPPORTED: (400, "INVALID_ARGUMENT"),
    Reason.UNSUPPORTED_OPERATION: (400, "FAILED_PRECONDITION"),
    Reason.PUSH_NOTIFICATION_NOT_SUPPORTED: (400, "FAILED_PRECONDITION"),
    Reason.TASK_NOT_FOUND: (404, "NOT_FOUND"),
    Reason.INTERNAL: (500, "INTERNAL"),
}


class A2AError(Exception):
    """A client-visible A2A error; the HTTP layer renders it with :func:`envelope`."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    def body(self) -> bytes:
        return envelope(self.reason, self.message)


def envelope(reason: Reason, message: str) -> bytes:
    """The exact §6 envelope; ``code`` repeats the HTTP status."""
    doc: dict[str, Any] = {
        "error": {
            "code": reason.http_status,
            "status": reason.status,
            "message": message,
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reason.name,
                    "domain": "a2a-protocol.org",
                }
            ],
        }
    }
    return json_bytes(doc)


# Messages peers use (conformance notes, "Messages").
UNKNOWN_CONTEXT = "Unknown contextId"
TASK_NOT_FOUND = "Task not found"
INVALID_JSON = "Invalid JSON request body"
ROLE_MUST_BE_USER = "Message role must be ROLE_USER"
BLANK_TEXT = "Message text must not be blank"
INVALID_PAGE_SIZE = "Invalid pageSize"
INTERNAL_ERROR = "Internal error"
CONTEXT_CLOSED = "Conversation is closed; start a new one without contextId"
DUPLICATE_IN_FLIGHT = "A message with this messageId is still being processed"
STREAMING_UNSUPPORTED = "Streaming is not supported"
EXTENDED_CARD_UNSUPPORTED = "Extended agent card is not supported"
PUSH_UNSUPPORTED = "Push notifications are not supported"


def task_not_found(task_id: str) -> A2AError:
    return A2AError(Reason.TASK_NOT_FOUND, f"{TASK_NOT_FOUND}: {task_id}")
