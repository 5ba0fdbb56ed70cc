"""Production operations (reload): a good file swaps the runtime while turns run on the old one;
a bad file is logged with its YAML path and the old configuration keeps serving; settings
bound to start-up resources need a restart; the verifier is updated in place.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from gateway.config import ReloadConfig
from gateway.http.state import RUNTIME
from gateway.process.reload import ConfigWatcher, reload_app
from tests.ops.conftest import until
from tests.support.gateway import AUDIENCE, Harness, base_config
from tests.support.pa import FakeJwksServer, PAKey


@pytest.fixture
def raw(gw_memory: Harness, jwks_server: FakeJwksServer) -> dict[str, Any]:
    """The configuration ``gw_memory`` was built from, to edit and write out."""
    return base_config(gw_memory.issuer, jwks_server.jwks_uri, gw_memory.bot.url, "memory://")


def write(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


async def wait_for_bot_calls(harness: Harness, count: int) -> None:
    async def reached() -> bool:
        return len(harness.bot.calls) >= count

    await until(reached, 5, f"{count} bot calls")


async def test_reload_adds_and_removes_brands_while_a_turn_runs_on_the_old_runtime(
    gw_memory: Harness, raw: dict[str, Any], tmp_path: Path
) -> None:
    gw_memory.bot.gate = asyncio.Event()
    held = asyncio.create_task(gw_memory.send("Hi", brand="globex"))
    await wait_for_bot_calls(gw_memory, 1)

    new = copy.deepcopy(raw)
    new["brands"] = [
        new["brands"][0],
        {**copy.deepcopy(new["brands"][1]), "id": "initech", "name": "Initech"},
    ]
    config = reload_app(gw_memory.client.app, write(tmp_path / "gw.yaml", new))
    assert config is not None
    assert sorted(config.brands) == ["acme", "initech"]

    card = await gw_memory.client.get("/a2a/initech/.well-known/agent-card.json")
    assert card.status == 200
    assert orjson.loads(await card.read())["name"] == "Initech"
    assert (await gw_memory.client.get("/a2a/globex/.well-known/agent-card.json")).status == 404
    assert (await gw_memory.send(brand="globex")).status == 404

    gw_memory.bot.gate.set()
    finished = await held
    assert finished.status == 200  # started on the old runtime, where globex still existed
    assert orjson.loads(await finished.read())["message"]["role"] == "ROLE_AGENT"


async def test_bad_file_is_logged_with_its_yaml_path_and_the_old_config_keeps_serving(
    gw_memory: Harness, raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gw_memory.bot.gate = asyncio.Event()
    held = asyncio.create_task(gw_memory.send("Hi"))
    await wait_for_bot_calls(gw_memory, 1)
    before = gw_memory.client.app[RUNTIME].current

    bad = copy.deepcopy(raw)
    bad["brands"][1]["upstream"]["url"] = "ftp://bot.example/chat"
    path = write(tmp_path / "gw.yaml", bad)
    with caplog.at_level(logging.ERROR, logger="pact_gateway.reload"):
        assert reload_app(gw_memory.client.app, path) is None
    (record,) = [r for r in caplog.records if r.name == "pact_gateway.reload"]
    assert "brands[1].upstream.url" in record.getMessage()
    assert str(path) in record.getMessage()
    assert getattr(record, "yaml_path", None) == "brands[1].upstream.url"

    (tmp_path / "broken.yaml").write_text("brands: [unclosed", encoding="utf-8")
    assert reload_app(gw_memory.client.app, tmp_path / "broken.yaml") is None
    assert reload_app(gw_memory.client.app, tmp_path / "missing.yaml") is None

    assert gw_memory.client.app[RUNTIME].current is before
    assert (await gw_memory.client.get("/a2a/globex/.well-known/agent-card.json")).status == 200
    gw_memory.bot.gate.set()
    assert (await held).status == 200
    assert (await gw_memory.send(brand="globex")).status == 200


async def test_restart_only_settings_keep_their_running_values(
    gw_memory: Harness, raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    running = gw_memory.client.app[RUNTIME].current.config
    new = copy.deepcopy(raw)
    new["listen"] = {"host": "127.0.0.1", "port": 18181}
    new["cache"] = {"url": "redis://127.0.0.1:6379/3"}
    new["metrics"] = {"enabled": True, "port": 19191}
    new["limits"] = {"shutdown_timeout": 3, "max_body_bytes": 1000, "bot_answer_fields": 50}
    new["brands"][0]["name"] = "Acme Renamed"
    with caplog.at_level(logging.WARNING, logger="pact_gateway.reload"):
        config = reload_app(gw_memory.client.app, write(tmp_path / "gw.yaml", new))
    assert config is not None
    assert (config.listen, config.cache, config.metrics) == (running.listen, running.cache, running.metrics)
    assert config.limits.shutdown_timeout == running.limits.shutdown_timeout
    assert config.limits.bot_answer_fields == running.limits.bot_answer_fields  # read by the bot client
    assert config.limits.max_body_bytes == 1000  # read per request: applies at once
    assert config.brands["acme"].name == "Acme Renamed"
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert getattr(warning, "restart_needed", None) == [
        "listen",
        "cache",
        "metrics",
        "limits.shutdown_timeout",
        "limits.bot_answer_fields",
    ]


async def test_verifier_is_updated_in_place_and_drops_a_disabled_issuers_tokens(
    gw_memory: Harness, raw: dict[str, Any], tmp_path: Path
) -> None:
    """§3.1: a personal agent disabled by a reload gets 401 at once, even for a cached token."""
    app = gw_memory.client.app
    verifier = app[RUNTIME].current.verifier
    headers = gw_memory.auth()
    assert (await gw_memory.send(headers=headers)).status == 200
    disabled = copy.deepcopy(raw)
    disabled["personal_agents"]["registered"][0]["enabled"] = False
    assert reload_app(app, write(tmp_path / "gw.yaml", disabled)) is not None
    assert app[RUNTIME].current.verifier is verifier
    assert (await gw_memory.send(headers=headers)).status == 401
    assert reload_app(app, write(tmp_path / "gw.yaml", raw)) is not None
    assert (await gw_memory.send(headers=headers)).status == 200


async def test_config_watcher_reloads_on_change_only_when_watching(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text("a: 1\n", encoding="utf-8")
    settings = ReloadConfig(watch=True, interval=0.02)
    changes: list[int] = []
    watcher = asyncio.create_task(ConfigWatcher(path, lambda: settings, lambda: changes.append(1)).run())
    try:
        await asyncio.sleep(0.1)
        assert changes == []
        path.write_text("a: 22\n", encoding="utf-8")

        async def changed() -> bool:
            return bool(changes)

        await until(changed, 5, "the watcher's call")
        settings = ReloadConfig(watch=False, interval=0.02)
        path.write_text("a: 333\n", encoding="utf-8")
        await asyncio.sleep(0.2)
        assert changes == [1]
    finally:
        watcher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watcher


async def test_reload_keeps_a_brands_guarded_bot_only_while_its_upstream_is_unchanged(
    gw_memory: Harness, raw: dict[str, Any], tmp_path: Path
) -> None:
    """A reload must not reset an open circuit breaker (or free held slots) of an untouched bot."""
    app = gw_memory.client.app
    before = app[RUNTIME].current.bots
    same = copy.deepcopy(raw)
    same["brands"][0]["name"] = "Acme Support, renamed"
    assert reload_app(app, write(tmp_path / "same.yaml", same)) is not None
    after = app[RUNTIME].current.bots
    assert after["acme"] is before["acme"]
    assert after["globex"] is before["globex"]

    moved = copy.deepcopy(same)
    moved["brands"][1]["upstream"]["timeout"] = 3
    assert reload_app(app, write(tmp_path / "moved.yaml", moved)) is not None
    latest = app[RUNTIME].current.bots
    assert latest["acme"] is before["acme"]
    assert latest["globex"] is not before["globex"]
    assert (await gw_memory.send(brand="globex")).status == 200


async def test_s3_1_reload_moving_an_issuer_to_another_jwks_uri_drops_tokens_of_its_old_keys(
    gw_memory: Harness, raw: dict[str, Any], tmp_path: Path
) -> None:
    """Issue 12 row 8: a token the old keys signed, accepted (and cached) before the reload, is
    checked against the new ``jwks_uri`` after it, and refused there; the new keys are served."""
    app = gw_memory.client.app
    before = gw_memory.auth()
    assert (await gw_memory.send(headers=before)).status == 200
    async with FakeJwksServer() as moved_to:
        successor = PAKey.es256()
        moved_to.set_keys(successor)
        moved = copy.deepcopy(raw)
        moved["personal_agents"]["registered"][0]["jwks_uri"] = moved_to.jwks_uri
        assert reload_app(app, write(tmp_path / "gw.yaml", moved)) is not None
        assert (await gw_memory.send(headers=before)).status == 401
        assert (await gw_memory.send()).status == 401  # a fresh token by the old key
        after = {"Authorization": f"Bearer {successor.mint(gw_memory.issuer, 'alice', AUDIENCE)}"}
        assert (await gw_memory.send(headers=after)).status == 200
        assert moved_to.fetch_count == 1
