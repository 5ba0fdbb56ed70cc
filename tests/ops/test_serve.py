"""Production operations (lifecycle): ``pact-gateway serve`` as a real process on loopback.

SIGTERM drains an in-flight turn within ``limits.shutdown_timeout`` and exits 0; SIGHUP
reloads (a bad file keeps the old configuration); ``--workers 2`` on Redis shares one port
and ``/metrics`` sums both workers; ``--workers 2`` with ``memory://`` is refused (exit 2).
Every process runs in its own group and is killed at teardown whatever happens.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import logging
import os
import signal
import socket
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from gateway.cli import main
from gateway.config import load_config
from gateway.ops.metrics import Metrics
from gateway.process.server import YOUNG_GC_THRESHOLD, GatewayServer, settle_heap
from tests.ops.conftest import Processes, ServeProcess, sample, until
from tests.support.bot import ControlledBot
from tests.support.gateway import AUDIENCE, base_config
from tests.support.pa import FakeJwksServer, PAKey


@pytest.fixture
def raw(pa_issuer: str, jwks_server: FakeJwksServer, bot: ControlledBot) -> dict[str, Any]:
    config = base_config(pa_issuer, jwks_server.jwks_uri, bot.url, "memory://")
    config["limits"] = {"shutdown_timeout": 10}
    return config


def turn_body(message_id: str = "m-1") -> dict[str, Any]:
    return {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "Hi"}]}}


async def post_turn(served: ServeProcess, token: str, brand: str = "acme") -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{served.base_url}/a2a/{brand}/message:send",
            json=turn_body(),
            headers={"Authorization": f"Bearer {token}"},
        ) as response,
    ):
        return response.status, await response.read()


async def status_of(url: str) -> int | None:
    """The status of a GET on a fresh connection; ``None`` when the connection is refused."""
    try:
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
            session.get(url) as response,
        ):
            return response.status
    except aiohttp.ClientConnectionError:
        return None


async def wait_for_bot_calls(bot: ControlledBot, count: int) -> None:
    async def reached() -> bool:
        return len(bot.calls) >= count

    await until(reached, 20, f"{count} bot calls")


async def test_sigterm_drains_an_in_flight_turn_and_exits_0(
    processes: Processes, raw: dict[str, Any], bot: ControlledBot, es256_key: PAKey, pa_issuer: str
) -> None:
    served = await processes.new(raw).start()
    await served.ready()
    bot.gate = asyncio.Event()
    turn = asyncio.create_task(post_turn(served, es256_key.mint(pa_issuer, "alice", AUDIENCE)))
    await wait_for_bot_calls(bot, 1)
    served.send(signal.SIGTERM)

    card = f"{served.base_url}/a2a/acme/.well-known/agent-card.json"

    async def refused() -> bool:
        return await status_of(card) is None

    await until(refused, 10, "the A2A port stops accepting")
    assert await status_of(f"{served.ops_url}/readyz") == 503  # draining: no new traffic
    assert not turn.done()
    bot.gate.set()
    status, body = await asyncio.wait_for(turn, 10)
    assert status == 200
    assert orjson.loads(body)["message"]["role"] == "ROLE_AGENT"
    assert await served.wait() == 0
    messages = [record["message"] for record in served.logs()]
    assert "SIGTERM received: shutting down" in messages
    assert "stopped" in messages


async def test_shutdown_timeout_bounds_the_drain(
    processes: Processes, raw: dict[str, Any], bot: ControlledBot, es256_key: PAKey, pa_issuer: str
) -> None:
    raw["limits"] = {"shutdown_timeout": 1}
    served = await processes.new(raw).start()
    await served.ready()
    bot.gate = asyncio.Event()  # never released: the turn outlives the bound
    turn = asyncio.create_task(post_turn(served, es256_key.mint(pa_issuer, "alice", AUDIENCE)))
    await wait_for_bot_calls(bot, 1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    served.send(signal.SIGTERM)
    assert await served.wait(15) == 0
    assert loop.time() - started < 8
    with pytest.raises(aiohttp.ClientError):
        await asyncio.wait_for(turn, 10)


async def test_sighup_reloads_a_good_file_and_keeps_the_old_config_on_a_bad_one(
    processes: Processes, raw: dict[str, Any]
) -> None:
    served = await processes.new(raw).start()
    await served.ready()
    card = f"{served.base_url}/a2a/{{}}/.well-known/agent-card.json"

    new = copy.deepcopy(served.raw)
    new["brands"] = [
        new["brands"][0],
        {**copy.deepcopy(new["brands"][1]), "id": "initech", "name": "Initech"},
    ]
    served.write_config(new)
    served.send(signal.SIGHUP)

    async def initech_served() -> bool:
        return await status_of(card.format("initech")) == 200

    await until(initech_served, 10, "the new Brand's card")
    assert await status_of(card.format("globex")) == 404

    bad = copy.deepcopy(new)
    bad["brands"][0]["upstream"]["url"] = "ftp://bot.example/chat"
    served.write_config(bad)
    served.send(signal.SIGHUP)

    async def rejected() -> bool:
        return any(r.get("yaml_path") == "brands[0].upstream.url" for r in served.logs())

    await until(rejected, 10, "the rejection in the log")
    assert await status_of(card.format("initech")) == 200
    assert await status_of(card.format("acme")) == 200
    served.send(signal.SIGTERM)
    assert await served.wait() == 0


async def test_workers_2_on_redis_share_the_port_and_metrics_aggregate(
    processes: Processes,
    raw: dict[str, Any],
    redis_url: str,
    bot: ControlledBot,
    es256_key: PAKey,
    pa_issuer: str,
    jwks_server: FakeJwksServer,
) -> None:
    raw["cache"] = {"url": redis_url}
    served = await processes.new(raw).start("--workers", "2")
    await served.ready()
    requests = 40
    card = f"{served.base_url}/a2a/acme/.well-known/agent-card.json"
    statuses = [await status_of(card) for _ in range(requests)]  # a new connection each
    assert statuses == [200] * requests
    status, _ = await post_turn(served, es256_key.mint(pa_issuer, "alice", AUDIENCE))
    assert status == 200

    async with aiohttp.ClientSession() as session, session.get(f"{served.ops_url}/metrics") as response:
        text = await response.text()
    assert (
        sample(text, "pact_requests_total", brand="acme", operation="GetAgentCard", outcome="ok") == requests
    )
    assert sample(text, "pact_requests_total", brand="acme", operation="SendMessage", outcome="ok") == 1
    assert sample(text, "pact_bot_call_duration_seconds_count", brand="acme", outcome="ok") == 1
    # Supervisor and both workers each fetched both enabled issuers' keys (one server serves them).
    assert sample(text, "pact_jwks_fetches_total", result="ok") == jwks_server.fetch_count == 6
    assert sample(text, "pact_jwks_fetches_total", issuer=pa_issuer, result="ok") == 3

    assert served.process is not None
    access = [r for r in served.logs() if r["logger"] == "pact_gateway.access"]
    by_pid = Counter(record["pid"] for record in access)
    assert sum(by_pid.values()) == requests + 1
    assert len(by_pid) == 2  # the kernel spread the connections over both workers
    assert served.process.pid not in by_pid  # the supervisor serves no A2A traffic

    served.send(signal.SIGTERM)
    assert await served.wait() == 0
    assert served.tmpdir is not None
    assert list(served.tmpdir.glob("pact-gateway-metrics-*")) == []  # the multiprocess dir is removed


async def test_workers_supervisor_restarts_a_dead_worker(
    processes: Processes, raw: dict[str, Any], redis_url: str
) -> None:
    raw["cache"] = {"url": redis_url}
    served = await processes.new(raw).start("--workers", "2")
    await served.ready()
    card = f"{served.base_url}/a2a/acme/.well-known/agent-card.json"
    for _ in range(10):
        assert await status_of(card) == 200
    pids = [
        r["message"].rsplit("pid ", 1)[1].rstrip(")") for r in served.logs() if "serving (pid" in r["message"]
    ]
    victim = int(pids[0])
    os.kill(victim, signal.SIGKILL)  # a worker this test started (through the supervisor), by its id

    async def replaced() -> bool:
        return sum("serving (pid" in r["message"] for r in served.logs()) == 3

    await until(replaced, 20, "a replacement worker")
    await served.ready()
    async with aiohttp.ClientSession() as session, session.get(f"{served.ops_url}/metrics") as response:
        text = await response.text()
    # The dead worker's counts stay in the sum: totals never go backwards.
    assert sample(text, "pact_requests_total", operation="GetAgentCard", outcome="ok") == 10
    served.send(signal.SIGTERM)
    assert await served.wait() == 0


async def test_workers_2_with_the_memory_cache_exit_2(processes: Processes, raw: dict[str, Any]) -> None:
    served = await processes.new(raw).start("--workers", "2")
    assert await served.wait() == 2
    assert "needs a shared cache" in served.log_file.read_text()


def test_workers_must_be_at_least_1(
    tmp_path: Path, raw: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert main(["serve", "--config", str(path), "--workers", "0"]) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err


def test_serve_names_every_busy_port_in_one_line_and_exits_2(
    tmp_path: Path, raw: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 19 row 10: both ports taken are named at once, by the setting that chooses them, with
    exit 2 and no log line or traceback, as the demo answers."""
    with socket.socket() as a2a, socket.socket() as ops:
        for held in (a2a, ops):
            held.bind(("127.0.0.1", 0))
            held.listen()
        raw["listen"] = {"host": "127.0.0.1", "port": a2a.getsockname()[1]}
        raw["metrics"] = {"host": "127.0.0.1", "port": ops.getsockname()[1]}
        path = tmp_path / "gw.yaml"
        path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        assert main(["serve", "--config", str(path)]) == 2
    said = capsys.readouterr()
    assert said.out == ""
    assert said.err == (
        f"pact-gateway serve: 127.0.0.1:{raw['listen']['port']} (listen.port) is already in use;"
        f" 127.0.0.1:{raw['metrics']['port']} (metrics.port) is already in use; choose free ports in {path}\n"
    )


def test_serve_names_a_busy_admin_port_too_when_the_admin_api_is_on(
    tmp_path: Path, raw: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 18 row I10: the admin API's own listener is asked about with the others before start."""
    monkeypatch.setenv("PACT_ADMIN_TOKEN", "t" * 32)
    with socket.socket() as admin:
        admin.bind(("127.0.0.1", 0))
        admin.listen()
        raw["admin"] = {"enabled": True, "token": "${PACT_ADMIN_TOKEN}", "port": admin.getsockname()[1]}
        raw["listen"] = {"host": "127.0.0.1", "port": 0}  # any free port: never busy
        raw["metrics"] = {"host": "127.0.0.1", "port": 0}
        path = tmp_path / "gw.yaml"
        path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        assert main(["serve", "--config", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"pact-gateway serve: 127.0.0.1:{raw['admin']['port']} (admin.port) is already in use;"
        f" choose free ports in {path}\n"
    )


def test_settle_heap_freezes_start_up_and_raises_only_the_young_threshold() -> None:
    """What every serving process does once started (in-process here, and undone afterwards)."""
    before = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (YOUNG_GC_THRESHOLD, *before[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


async def test_i5_the_process_opening_an_admin_listener_off_loopback_warns_of_it(
    raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 28 I5: ``admin.host: 0.0.0.0`` is allowed, but said where the listener opens (the one
    process that serves it), as ``check-config`` prints it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    raw["admin"] = {"enabled": True, "token": "${PACT_ADMIN_TOKEN}", "host": "0.0.0.0", "port": port}  # noqa: S104
    config = load_config(raw, {"PACT_ADMIN_TOKEN": "t" * 32})
    server = GatewayServer(tmp_path / "gw.yaml", config, metrics=Metrics(), admin=True)
    with caplog.at_level(logging.WARNING, logger="pact_gateway.serve"):
        await server.start_admin()
    try:
        (warning,) = [record for record in caplog.records if record.name == "pact_gateway.serve"]
        assert warning.getMessage().startswith("admin.host: 0.0.0.0 is not a loopback address")
    finally:
        await server.stop()
