"""``pact-gateway conversations list|close|erase``: the admin API's actions, from a shell beside the store.

It talks to the gateway's shared store directly (``cache.url``), so it works only against Redis:
with ``memory://`` the conversations live inside the serving process, and its admin API
(``admin.enabled``) is the way in. What each action does, and what erasing leaves, is
:mod:`gateway.process.erasure`'s; its audit line goes to stderr in the configuration's
``logging.format``, marked ``via: cli``.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from gateway.config import GatewayConfig, LoggingConfig
from gateway.ops.logs import GatewayLogHandler, JsonFormatter, TextFormatter
from gateway.process.erasure import ADAPTER_STATE_NAMES, AUDIT_LOGGER, PersonRecords
from gateway.store import open_store
from gateway.store.base import Owner, StoreError
from gateway.store.factory import open_conversation_admin, open_oauth_store

__all__ = ["run_conversations"]


def _refuse(message: str) -> int:
    print(f"pact-gateway conversations: {message}", file=sys.stderr)
    return 2


@contextlib.contextmanager
def _audit_to_stderr(config: LoggingConfig) -> Iterator[None]:
    """The audit line on stderr for the command's length, formatted as the gateway formats its lines.

    Only the audit logger's, and undone afterwards: the command is a short process of its own,
    with nothing else to log, and :func:`~gateway.cli.main` may run in another program's.
    """
    audit = logging.getLogger(AUDIT_LOGGER)
    handler = GatewayLogHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if config.format == "json" else TextFormatter())
    level = audit.level
    audit.addHandler(handler)
    audit.setLevel(logging.INFO)
    try:
        yield
    finally:
        audit.removeHandler(handler)
        audit.setLevel(level)


def _when(seconds: float | None) -> str:
    return "-" if seconds is None else datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def run_conversations(
    config: GatewayConfig, verb: str, person: Owner, context_id: str | None = None
) -> int:
    """List, close (``context_id``) or erase ``person``'s conversations; exit 2 on an operator's mistake."""
    if person.brand_id not in config.brands:
        return _refuse(f"no Brand {person.brand_id!r} in this configuration")
    if config.cache.backend == "memory":
        return _refuse(
            "cache.url is memory://: conversations live inside the gateway process; "
            "use its admin API (admin.enabled) or a redis:// cache"
        )
    store = open_store(config.cache)
    try:
        admin = open_conversation_admin(store, config.cache, ADAPTER_STATE_NAMES)
        records = PersonRecords(admin, open_oauth_store(store), time.time, via="cli")
        with _audit_to_stderr(config.logging):
            return await _act(records, verb, person, context_id)
    except StoreError as exc:
        return _refuse(f"the store at cache.url did not answer: {exc}")
    finally:
        await store.close()


async def _act(records: PersonRecords, verb: str, person: Owner, context_id: str | None) -> int:
    """One verb's action and what it prints; 2 for a conversation the person does not have."""
    if verb == "list":
        found = await records.conversations(person)
        for info in found:
            print(
                f"{info.context_id}  opened={_when(info.opened_at)}  turns={info.turns}  "
                f"in_flight={info.in_flight}  {'closed' if info.closed else 'open'}"
            )
        print(f"{len(found)} conversation(s)")
        return 0
    if verb == "close":
        assert context_id is not None  # the parser requires --context for close
        if not await records.close(person, context_id):
            return _refuse(f"that person has no conversation {context_id!r} at {person.brand_id}")
        print(f"closed {context_id}")
        return 0
    erasure = await records.erase(person)
    for name, count in erasure.counts().items():
        print(f"{name}: {count}")
    return 0
