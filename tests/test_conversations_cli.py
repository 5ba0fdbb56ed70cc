"""``pact-gateway conversations list|close|erase``: the admin API's actions from a shell, on the shared store.

Conversations are made through the store's own turn protocol, as a gateway replica would have
stored them on the same Redis; the CLI then works on them with nothing but the configuration file.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main
from gateway.config import GatewayConfig, load_config
from gateway.ops.logs import sub_digest
from gateway.process.erasure import AUDIT_LOGGER
from gateway.store import Owner, TurnStatus, open_store
from tests.ops.conftest import free_port
from tests.support.gateway import base_config

PA = "https://pa.example"
SUB = "person-77d0-alice"
PERSON = Owner("acme", PA, SUB)
BOB = Owner("acme", PA, "bob-0000")


def _config_file(tmp_path: Path, cache_url: str) -> tuple[Path, GatewayConfig]:
    raw: dict[str, Any] = base_config(PA, f"{PA}/jwks", "http://bot", cache_url)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path, load_config(raw, {})


async def _conversation(config: GatewayConfig, owner: Owner, context_id: str, *, answered: bool) -> None:
    """A conversation as a replica stores one: its first message claimed, then (maybe) answered."""
    store = open_store(config.cache)
    try:
        claim = await store.begin_turn(owner, None, f"m-{context_id}", "hello", context_id)
        assert claim.status is TurnStatus.NEW
        if answered:
            await store.complete_turn(owner, context_id, f"m-{context_id}", b"a reply", close=False)
    finally:
        await store.close()


async def _turn(config: GatewayConfig, owner: Owner, context_id: str) -> TurnStatus:
    store = open_store(config.cache)
    try:
        return (await store.begin_turn(owner, context_id, "m-next", "more", "")).status
    finally:
        await store.close()


async def test_operator_lists_closes_and_erases_a_persons_conversations(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, config = _config_file(tmp_path, redis_url)
    await _conversation(config, PERSON, "ctx-one", answered=True)
    await _conversation(config, PERSON, "ctx-two", answered=False)
    await _conversation(config, BOB, "ctx-bob", answered=True)
    who = ["--config", str(path), "--brand", "acme", "--pa", PA, "--sub", SUB]

    assert await _run(["conversations", "list", *who]) == 0
    out = capsys.readouterr().out
    assert "ctx-one" in out
    assert "turns=1  in_flight=0  open" in out
    assert "ctx-two" in out
    assert "turns=0  in_flight=1  open" in out
    assert "ctx-bob" not in out
    assert "hello" not in out
    assert "a reply" not in out
    assert out.endswith("2 conversation(s)\n")

    assert await _run(["conversations", "close", *who, "--context", "ctx-one"]) == 0
    assert capsys.readouterr().out == "closed ctx-one\n"
    assert await _turn(config, PERSON, "ctx-one") is TurnStatus.CLOSED
    assert await _run(["conversations", "close", *who, "--context", "ctx-bob"]) == 2
    assert "that person has no conversation 'ctx-bob' at acme" in capsys.readouterr().err

    assert await _run(["conversations", "erase", *who]) == 0
    captured = capsys.readouterr()
    assert "conversations: 2\n" in captured.out
    assert "replies: 1\n" in captured.out
    assert "in_flight: 1\n" in captured.out
    audits = [json.loads(line) for line in captured.err.splitlines() if AUDIT_LOGGER in line]
    assert [(a["action"], a["via"]) for a in audits] == [("erase", "cli")]
    assert audits[0]["sub_hash"] == sub_digest(PA, SUB)
    assert SUB not in captured.err
    for context_id in ("ctx-one", "ctx-two"):
        assert await _turn(config, PERSON, context_id) is TurnStatus.UNKNOWN_CONTEXT
    assert await _turn(config, BOB, "ctx-bob") is TurnStatus.NEW
    assert await _run(["conversations", "list", *who]) == 0
    assert capsys.readouterr().out == "0 conversation(s)\n"


async def test_conversations_refuses_memory_cache_and_unknown_brand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _config_file(tmp_path, "memory://")
    who = ["--config", str(path), "--pa", PA, "--sub", SUB]
    assert await _run(["conversations", "erase", *who, "--brand", "acme"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cache.url is memory://" in err
    assert "admin API" in err
    assert await _run(["conversations", "list", *who, "--brand", "initech"]) == 2
    assert "no Brand 'initech' in this configuration" in capsys.readouterr().err
    down, _ = _config_file(tmp_path, f"redis://127.0.0.1:{free_port()}/0")
    assert await _run(["conversations", "list", "--config", str(down), "--brand", "acme", *who[2:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pact-gateway conversations: the store at cache.url did not answer: redis: ")
    assert err.count("\n") == 1


async def _run(argv: list[str]) -> int:
    """``main`` runs its own event loop, so it runs in a thread beside the test's."""
    return await asyncio.to_thread(main, argv)
