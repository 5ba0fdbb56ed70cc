"""Where a profiled gateway spends its time per request, from a pyinstrument session.

pyinstrument (a sampling profiler, a separate install: ``pip install pyinstrument``) runs
the real CLI during one gateway-memory round; its session is rendered once as text for a
person and once in pstats format, which the standard library reads back here. Time the
event loop spends waiting in ``select``/``epoll`` is idle time and is left out, so shares
are of the time the process was actually working.
"""

from __future__ import annotations

import pstats
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["summarize"]

# The event loop waiting for I/O: a C call seen from Python as "<built-in>" (or selectors.py).
_IDLE_FUNCTIONS = {"epoll.poll", "poll.poll", "select.select", "kqueue.control", "devpoll.poll"}
_PACKAGES = (
    ("gateway", re.compile(r"/gateway/")),
    ("aiohttp", re.compile(r"/aiohttp/")),
    ("aiocache", re.compile(r"/aiocache/")),
    ("redis-py", re.compile(r"/redis/")),
    ("PyJWT/cryptography", re.compile(r"/(jwt|cryptography)/")),
    ("prometheus_client", re.compile(r"/prometheus_client/")),
    ("logging", re.compile(r"/logging/")),
    ("asyncio", re.compile(r"/asyncio/")),
    ("yarl/multidict", re.compile(r"/(yarl|multidict)/")),
)


def _short(path: str) -> str:
    path = re.split(r"/site-packages/|/lib/python3\.\d+/", path)[-1]
    marker = "/gateway/"
    return "gateway/" + path.split(marker, 1)[1] if marker in path else path


def _package(path: str) -> str:
    for name, pattern in _PACKAGES:
        if pattern.search(path):
            return name
    return "other"


def _is_idle(key: tuple[str, int, str]) -> bool:
    return key[2] in _IDLE_FUNCTIONS or key[2] == "[await]"


def _is_startup(key: tuple[str, int, str]) -> bool:
    """Module bodies run at import: start-up, not a request's cost."""
    return key[2] == "<module>"


def summarize(pstats_path: Path, requests: int, top: int = 15) -> dict[str, Any]:
    """Busy time per request, self time by package, and the top functions (self and gateway/ cumulative)."""
    stats: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(str(pstats_path)).stats  # type: ignore[attr-defined]
    self_time = {key: float(value[2]) for key, value in stats.items()}
    cumulative = {key: float(value[3]) for key, value in stats.items()}
    idle = sum(t for key, t in self_time.items() if _is_idle(key))
    startup = sum(t for key, t in self_time.items() if _is_startup(key))
    busy = max(sum(self_time.values()) - idle - startup, 1e-9)
    per_request = 1e6 / max(requests, 1)

    by_package: dict[str, float] = defaultdict(float)
    for key, seconds in self_time.items():
        if not (_is_idle(key) or _is_startup(key)):
            by_package[_package(key[0])] += seconds

    def row(key: tuple[str, int, str], seconds: float) -> dict[str, Any]:
        return {
            "function": f"{_short(key[0])}:{key[1]} {key[2]}",
            "share_of_busy": seconds / busy,
            "us_per_request": seconds * per_request,
        }

    working = [k for k in self_time if not (_is_idle(k) or _is_startup(k))]
    hottest_self = sorted(working, key=lambda k: -self_time[k])[:top]
    # Entry points (the CLI, serve, the loop runner) wrap everything: they say nothing about a request.
    gateway_keys = [k for k in working if "/gateway/" in k[0] and cumulative[k] < 0.9 * busy]
    hottest_gateway = sorted(gateway_keys, key=lambda k: -cumulative[k])[:top]
    return {
        "requests": requests,
        "busy_s": busy,
        "idle_s": idle,
        "startup_s": startup,
        "busy_us_per_request": busy * per_request,
        "self_time_by_package": {
            name: {"share_of_busy": seconds / busy, "us_per_request": seconds * per_request}
            for name, seconds in sorted(by_package.items(), key=lambda item: -item[1])
        },
        "top_self": [row(k, self_time[k]) for k in hottest_self],
        "top_gateway_cumulative": [row(k, cumulative[k]) for k in hottest_gateway],
    }
