"""``pact-gateway check-config PATH --probe``: does everything the file names answer, and how fast?

A valid file can still name a Redis that is down, a personal agent whose key set moved, a
Brand login whose keys cannot be read, or a bot at the wrong URL; each shows up only when the
first User's turn fails. The probe asks each of them once, as the gateway would, and prints a
table of what answered and in how many milliseconds:

* ``cache``: the store's ``ping`` (Redis ``PING``; memory answers in-process);
* ``pa keys``: each enabled registered personal agent's key set, fetched under the same rules
  as at serving time (gateway/auth/jwks.py: size cap, timeout, no redirects, the address guard
  outside development) and parsed: no usable §3.2 signing key is a failure; inline key sets
  are parsed without a fetch;
* ``login keys``: each delegating Brand's login ``jwks_uri`` (§5.3), the same way (or its inline keys);
* ``bot``: each Brand's adapter's :meth:`~gateway.upstream.base.BotAdapter.probe`, one harmless
  request that starts no conversation (each adapter documents which).

Every check runs at once (the slowest bounds the wait) and each failure is one row, never a
traceback: a check that raises anything is reported as that failure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gateway.auth.jwks import FetchError, JsonFetcher, make_fetch_session, parse_jwks
from gateway.config import BrandConfig, GatewayConfig
from gateway.ops.metrics import Metrics
from gateway.store import ConversationStore, open_store
from gateway.store.adapter_state import AdapterState
from gateway.store.base import StoreError
from gateway.store.factory import open_adapter_state
from gateway.store.redis_pipe import RedisAddress
from gateway.upstream.base import UpstreamError
from gateway.upstream.client import AnswerBounds, BotClient
from gateway.upstream.factory import make_adapter

__all__ = ["ProbeResult", "format_table", "run_probes"]

MAX_DETAIL: Final = 100
"""A row's detail is cut to this many characters: it may quote what a remote server said."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    check: str
    target: str
    ok: bool
    ms: float
    detail: str


class ProbeFailed(Exception):
    """A check's own verdict that what answered is unusable (the message says why)."""


async def run_probes(config: GatewayConfig) -> list[ProbeResult]:
    """Every check for ``config``, in the order of the table: cache, personal agents, logins, bots."""
    store = open_store(config.cache)
    fetch_session = make_fetch_session(config.personal_agents.jwks, config.development)
    fetcher = JsonFetcher(fetch_session, config.personal_agents.jwks, development=config.development)
    # The bots' client as the gateway makes it.
    bot_client = BotClient(bounds=AnswerBounds.of(config.limits))
    try:
        state = open_adapter_state(store)
        checks: list[tuple[str, str, Callable[[], Awaitable[str]]]] = [
            ("cache", _cache_target(config), lambda: _ping(store))
        ]
        for agent in config.personal_agents.registered:
            if not agent.enabled:
                continue
            if agent.jwks is not None:
                checks.append(("pa keys", agent.issuer, _inline_keys(agent.jwks)))
            elif agent.jwks_uri is not None:
                checks.append(("pa keys", agent.issuer, _fetched_keys(fetcher, agent.jwks_uri)))
        for brand in config.brands.values():
            login = brand.delegation.login if brand.delegation is not None else None
            if login is not None and login.jwks is not None:
                checks.append(("login keys", brand.id, _inline_keys(login.jwks)))
            elif login is not None and login.jwks_uri is not None:
                checks.append(("login keys", brand.id, _fetched_keys(fetcher, login.jwks_uri)))
        for brand in config.brands.values():
            target = f"{brand.id} ({brand.upstream.adapter})"
            checks.append(("bot", target, _bot(brand, bot_client, state, config)))
        return list(await asyncio.gather(*(_timed(*check) for check in checks)))
    finally:
        await bot_client.close()
        await fetch_session.close()
        await store.close()


async def _timed(check: str, target: str, run: Callable[[], Awaitable[str]]) -> ProbeResult:
    started = time.perf_counter()
    try:
        detail, ok = await run(), True
    except (ProbeFailed, FetchError, StoreError) as exc:
        detail, ok = str(exc), False
    except UpstreamError as exc:
        detail, ok = f"{exc.reason}: {exc.detail}" if exc.detail else exc.reason, False
    except Exception as exc:
        # Whatever else a check raises is still one row: the command never ends in a traceback.
        detail, ok = f"{type(exc).__name__}: {exc}", False
    ms = (time.perf_counter() - started) * 1000
    return ProbeResult(check, target, ok, ms, _one_line(detail))


def _cache_target(config: GatewayConfig) -> str:
    """The cache without its credentials: scheme, host, port and database."""
    if config.cache.backend == "memory":
        return "memory://"
    address = RedisAddress.from_url(config.cache.url)
    scheme = "rediss" if address.tls else "redis"
    return f"{scheme}://{address.host}:{address.port}/{address.db}"


async def _ping(store: ConversationStore) -> str:
    await store.ping()
    return "PONG"


def _count_keys(document: Mapping[str, Any]) -> str:
    try:
        keys = parse_jwks(document)
    except ValueError as exc:
        raise ProbeFailed(str(exc)) from None
    usable = [key for key in keys if not key.weak]
    if not usable:
        raise ProbeFailed(f"no usable signing key ({len(keys)} weak)" if keys else "no usable signing key")
    kinds = ", ".join(sorted({key.alg for key in usable}))
    return f"{len(usable)} usable key(s): {kinds}"


def _inline_keys(jwks: Mapping[str, Any]) -> Callable[[], Awaitable[str]]:
    async def check() -> str:
        return "inline: " + _count_keys(jwks)

    return check


def _fetched_keys(fetcher: JsonFetcher, url: str) -> Callable[[], Awaitable[str]]:
    async def check() -> str:
        document, ttl = await fetcher.get(url)
        return f"{_count_keys(document)}; cached {ttl:.0f} s"

    return check


def _bot(
    brand: BrandConfig, client: BotClient, state: AdapterState, config: GatewayConfig
) -> Callable[[], Awaitable[str]]:
    async def check() -> str:
        # A probe sends no turn, so it counts nothing: a registry of its own, read by no one.
        return await make_adapter(brand, client, state, cache=config.cache, metrics=Metrics()).probe()

    return check


def _one_line(text: str) -> str:
    """Printable, one line, bounded: a remote server's words must not forge rows or flood the terminal."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= MAX_DETAIL else flat[: MAX_DETAIL - 1] + "…"


def format_table(results: list[ProbeResult]) -> str:
    """The results as aligned columns: check, target, ok or FAILED, milliseconds, detail."""
    header = ("check", "target", "result", "ms", "detail")
    rows = [
        (result.check, result.target, "ok" if result.ok else "FAILED", f"{result.ms:.1f}", result.detail)
        for result in results
    ]
    widths = [max(len(row[column]) for row in (header, *rows)) for column in range(4)]
    lines = []
    for row in (header, *rows):
        cells = [
            row[0].ljust(widths[0]),
            row[1].ljust(widths[1]),
            row[2].ljust(widths[2]),
            row[3].rjust(widths[3]),
        ]
        lines.append("  ".join((*cells, row[4])).rstrip())
    return "\n".join(lines)
