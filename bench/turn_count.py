"""``python -m bench turn_count``: instructions per Identity turn in one process, cheap enough for CI.

The same :class:`~gateway.process.server.GatewayServer` as ``pact-gateway serve`` (memory store,
access lines, metrics, the request-timeout connection layer) runs in one Python process with a
client and a bot of a few lines of raw ``asyncio`` each, so nearly all it counts is the gateway's:
one §3 turn at a time, conversations of :data:`TURNS_PER_CONVERSATION` turns, :data:`USERS` users
whose PA JWTs were verified in the warm-up. The child runs under ``valgrind --tool=callgrind
--collect-atstart=no --toggle-collect=_PyEval_CallTracing`` and calls its measured window through
``sys.call_tracing``, so start-up and warm-up are left out by callgrind itself.

It prints the figure beside ``bench/baselines.json``'s and exits 1 beyond the tolerance there
(``tests/bench/test_turn_count.py`` is the CI guard); ``--write-baseline NOTE`` stores the figure
(the tolerance is kept). ``--redis-url URL`` counts the same turns on Redis (flushed first; no baseline).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import gateway_yaml, write_yaml
from bench.instructions import available, callgrind_totals
from bench.loadgen import AUDIENCE, ISSUER, Minter, user_sub
from bench.procs import REPO_ROOT, free_port, python_env
from gateway.pa_keys import generate_private_jwk, public_jwks

BASELINES = REPO_ROOT / "bench" / "baselines.json"
KEY = "identity_turn_instructions"
"""The entry of :data:`BASELINES` this module owns."""

TURNS = 200
"""Measured turns: enough that a few stray event-loop passes are a small share of the window."""
WARMUP = 40
USERS = 4
TURNS_PER_CONVERSATION = 5
TEXT = "Hi, where is my order?"
BOT_BODY = json.dumps({"text": "Your order A-10001 ships today.", "end": False}).encode()
CONTROL_TIMEOUT = 60.0
TIMEOUT = 600.0
"""Seconds the child may take under callgrind (about 20 in CI, start-up included)."""


# ---- the child: one process, gateway, client and bot ---------------------------------------------


class _Bot(asyncio.Protocol):
    """The least HTTP/1.1 server that answers every keep-alive request with one fixed reply."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            length = _content_length(self.buffer[:end])
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            assert self.transport is not None
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(BOT_BODY), BOT_BODY)
            )


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


class _Client:
    """A personal agent on one keep-alive connection: raw requests, replies read by Content-Length."""

    def __init__(self, port: int, minter: Minter) -> None:
        self.port = port
        self.authorization = [f"Bearer {minter.mint(user_sub(user))}" for user in range(USERS)]
        self.turn = 0
        self.contexts: list[str | None] = [None] * USERS
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def turns(self, count: int) -> None:
        for _ in range(count):
            await self.one()

    async def one(self) -> None:
        """The next turn: users take turns, each conversation is :data:`TURNS_PER_CONVERSATION` long."""
        assert self.reader is not None
        assert self.writer is not None
        user = self.turn % USERS
        if (self.turn // USERS) % TURNS_PER_CONVERSATION == 0:
            self.contexts[user] = None
        self.turn += 1
        message: dict[str, Any] = {
            "messageId": f"m-{uuid.uuid4().hex}",
            "role": "ROLE_USER",
            "parts": [{"text": TEXT}],
        }
        context = self.contexts[user]
        if context is not None:
            message["contextId"] = context
        body = json.dumps({"message": message}).encode()
        self.writer.write(
            b"POST /a2a/acme/message:send HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\n"
            b"Content-Type: application/json\r\nA2A-Version: 1.0\r\nContent-Length: %d\r\n\r\n%s"
            % (self.authorization[user].encode(), len(body), body)
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        reply = await self.reader.readexactly(_content_length(head))
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"turn {self.turn} failed: {head!r} {reply[:300]!r}")
        if context is None:
            self.contexts[user] = str(json.loads(reply)["message"]["contextId"])


def _gateway_config(workdir: Path, port: int, bot_port: int, jwks: dict[str, Any], cache_url: str) -> Path:
    """The bench's gateway (:func:`bench.harness.gateway_yaml`), Identity turns only, metrics on."""
    raw = gateway_yaml(
        port, jwks, {"url": f"http://127.0.0.1:{bot_port}/chat"}, {"url": cache_url}, metrics={}
    )
    return write_yaml(workdir / "gateway.yaml", raw)


def _instrument() -> None:
    """Turn callgrind's instrumentation on in this process (it started with ``--instr-atstart=no``).

    Start-up runs at a fraction of callgrind's cost uninstrumented. Valgrind reads the request
    only while this process runs code, so the wait polls instead of blocking in ``waitpid``.
    """
    control = subprocess.Popen(
        ["callgrind_control", "--instr=on", str(os.getpid())],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + CONTROL_TIMEOUT
    while control.poll() is None:
        if time.monotonic() > deadline:
            control.kill()
            raise RuntimeError("callgrind_control did not turn instrumentation on")
        time.sleep(0.01)
    if control.returncode != 0:
        raise RuntimeError(f"callgrind_control failed ({control.returncode})")


def _run_child(turns: int, cache_url: str) -> None:
    """Start-up and warm-up, then the measured window as the one call callgrind collects inside."""
    # Imported here: the parent process only starts valgrind and reads its file.
    from aiohttp import web

    from gateway.app import create_app
    from gateway.config import load_config_file
    from gateway.http.connection import GatewayRunner
    from gateway.ops.logs import configure_logging
    from gateway.process.server import settle_heap
    from gateway.store import ConversationStore
    from gateway.store.memory import MemoryStore
    from gateway.store.redis import RedisStore

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    bot = loop.run_until_complete(loop.create_server(_Bot, "127.0.0.1", 0))
    bot_port = int(bot.sockets[0].getsockname()[1])
    key = generate_private_jwk("ES256")
    with tempfile.TemporaryDirectory(prefix="pact-turn-count-") as workdir:
        config_path = _gateway_config(Path(workdir), free_port(), bot_port, public_jwks(key), cache_url)
        config = load_config_file(config_path)
        configure_logging(config.logging)  # access lines formatted and written, as in production
        # The app as pact-gateway serve runs it (gateway.process.server), but for the memory store's
        # expiry sweep: it runs by the clock (four times a second), so under callgrind, where a turn
        # takes a thousand times longer, it would be counted hundreds of times more often per turn
        # than at production speed and with the machine's load. Never started here; nothing expires.
        store: ConversationStore
        if config.cache.backend == "memory":
            store = MemoryStore(config.cache)
        else:
            store = RedisStore(config.cache)
            loop.run_until_complete(store.redis.execute("FLUSHDB"))
        runner = GatewayRunner(
            create_app(config, store=store),
            request_timeout=lambda: config.limits.request_timeout,
            access_log=None,
            handle_signals=False,
        )
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, config.listen.host, config.listen.port)
        loop.run_until_complete(site.start())
        client = _Client(config.listen.port, Minter(key, ISSUER, AUDIENCE))
        loop.run_until_complete(client.open())
        loop.run_until_complete(client.turns(WARMUP))
        settle_heap()
        _instrument()
        # --toggle-collect=_PyEval_CallTracing: callgrind counts inside this call only.
        sys.call_tracing(loop.run_until_complete, (client.turns(turns),))
        assert client.writer is not None
        client.writer.close()
        loop.run_until_complete(runner.cleanup())
        loop.run_until_complete(store.close())
    bot.close()
    loop.close()


# ---- the parent: valgrind, its file, the baseline ----------------------------------------------------


def count(turns: int = TURNS, cache_url: str = "memory://") -> float:
    """Instructions per measured turn, from one child under callgrind, on the store ``cache_url`` names."""
    with tempfile.TemporaryDirectory(prefix="pact-turn-count-") as out_dir:
        out = Path(out_dir) / "callgrind.out"
        done = subprocess.run(
            [
                *("valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no"),
                *("--toggle-collect=_PyEval_CallTracing", f"--callgrind-out-file={out}", sys.executable),
                *("-m", "bench", "turn_count", "--child", "--turns", str(turns), "--cache-url", cache_url),
            ],
            cwd=REPO_ROOT,
            # A fixed hash seed: with a random one, how dicts and sets collide moves the count by 2 %.
            env={**python_env(), "PYTHONHASHSEED": "0"},
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"the counted child failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return callgrind_totals(out) / turns


def read_baseline(path: Path = BASELINES) -> dict[str, Any]:
    entry: dict[str, Any] = json.loads(path.read_text())[KEY]
    return entry


def grown(measured: float, baseline: dict[str, Any]) -> bool:
    """Whether ``measured`` is above the baseline by more than its tolerance (a fraction)."""
    return measured / float(baseline["instructions"]) - 1 > float(baseline["tolerance"])


def stale(measured: float, baseline: dict[str, Any]) -> bool:
    """Whether ``measured`` is below the baseline by more than its tolerance: time to re-take it."""
    return 1 - measured / float(baseline["instructions"]) > float(baseline["tolerance"])


def write_baseline(measured: float, note: str, path: Path = BASELINES) -> None:
    document: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    entry = document.setdefault(KEY, {"tolerance": 0.02})
    entry["instructions"] = round(measured)
    entry["turns"] = TURNS
    entry["note"] = note
    path.write_text(json.dumps(document, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench turn_count", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=TURNS, help="measured turns")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cache-url", default="memory://", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help="count on a Redis store (a database the run flushes)")
    parser.add_argument("--write-baseline", metavar="NOTE", help="store this count in bench/baselines.json")
    args = parser.parse_args(argv)
    if args.child:
        _run_child(args.turns, args.cache_url)
        return 0
    if args.redis_url is not None and args.write_baseline is not None:
        parser.error("the baseline is the memory store's: --write-baseline takes no --redis-url")
    if not available():
        print("bench turn_count needs valgrind (callgrind)", file=sys.stderr)
        return 2
    if args.redis_url is not None:
        print(f"instructions per Identity turn on Redis: {count(args.turns, args.redis_url):,.0f}")
        return 0
    measured = count(args.turns)
    if args.write_baseline is not None:
        write_baseline(measured, args.write_baseline)
        print(f"instructions per Identity turn: {measured:,.0f} (stored in {BASELINES})")
        return 0
    baseline = read_baseline()
    over, ratio = grown(measured, baseline), measured / float(baseline["instructions"])
    verdict = "GROWN" if over else "below: re-take it" if stale(measured, baseline) else "within"
    print(
        f"instructions per Identity turn: {measured:,.0f}; baseline {baseline['instructions']:,} "
        f"(x{ratio:.4f}, tolerance {float(baseline['tolerance']):.0%}): {verdict}"
    )
    return 1 if over else 0
