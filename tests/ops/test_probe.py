"""``pact-gateway check-config PATH --probe`` against real servers on loopback, run as an operator runs it.

The command runs in a child process (its own event loop) while this test's loop serves the fakes:
the real Redis, personal agents' and a Brand login's key sets, and one bot per adapter.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.process.probe import ProbeResult, format_table
from tests.support.bot import ControlledBot
from tests.support.delegation import SCOPES, BrandLogin, new_provider_key_pem
from tests.support.fake_http_bot import FakeHttpBot
from tests.support.fake_rasa import FakeRasa
from tests.support.pa import FakeJwksServer, PAKey

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 60.0
"""Seconds the command may take on a loaded machine; every target here answers or refuses at once."""


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def brand(brand_id: str, upstream: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": brand_id,
        "name": brand_id.title(),
        "description": "d",
        "version": "1",
        "upstream": upstream,
    }


def gateway_file(
    tmp_path: Path,
    *,
    cache_url: str,
    pa: FakeJwksServer,
    login: FakeJwksServer,
    bot: ControlledBot,
    rasa: FakeRasa,
    http_bot: FakeHttpBot,
    es256_key: PAKey,
) -> Path:
    inline = {"keys": [es256_key.public_jwk()]}
    raw = {
        "public_url": "https://gw.test",
        "development": True,
        "provider": {"organization": "P", "url": "https://p.test", "audience": "aud"},
        "personal_agents": {
            "jwks": {"timeout": 5},
            "registered": [
                {"issuer": pa.issuer, "jwks_uri": pa.jwks_uri},
                {"issuer": "https://inline-pa.test", "jwks": inline},
                {
                    "issuer": "https://off-pa.test",
                    "jwks_uri": f"http://127.0.0.1:{closed_port()}/j",
                    "enabled": False,
                },
            ],
        },
        "cache": {"url": cache_url, "timeout": 5},
        "oauth": {"signing_keys": [{"value": new_provider_key_pem()}]},
        "brands": [
            {
                **brand("acme", {"url": bot.url, "timeout": 5}),
                "delegation": {
                    "scopes": dict(SCOPES),
                    "login": {
                        "url": "http://login.test/in",
                        "issuer": "https://login.test",
                        "jwks_uri": login.jwks_uri,
                    },
                },
            },
            {
                **brand("globex", {"adapter": "rasa", "url": rasa.url, "timeout": 5}),
                "delegation": {
                    "scopes": dict(SCOPES),
                    "login": {"url": "http://login.test/in", "issuer": "https://login.test", "jwks": inline},
                },
            },
            brand(
                "initech",
                {
                    "adapter": "http",
                    "url": http_bot.url(),
                    "timeout": 5,
                    "http": {
                        "body": {"q": "{{text}}"},
                        "reply": {"text": "a"},
                        "probe_url": http_bot.url("/healthz"),
                    },
                },
            ),
        ],
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


async def check_config(path: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "check-config",
        str(path),
        "--probe",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), LIMIT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def rows(out: str) -> dict[tuple[str, str], list[str]]:
    """The table's rows by (check, target): [result, ms, detail], cut where the header's columns start."""
    lines = out[out.index("check  ") :].splitlines()
    header = lines[0]
    target, result, detail = (header.index(name) for name in ("target", "result", "detail"))
    table: dict[tuple[str, str], list[str]] = {}
    for line in lines[1:]:
        if line.startswith("configuration OK"):
            break
        outcome, ms = line[result:detail].split()
        table[(line[:target].strip(), line[target:result].strip())] = [outcome, ms, line[detail:]]
    return table


@pytest.fixture
def probe_file(
    tmp_path: Path,
    jwks_server: FakeJwksServer,
    login_keys: FakeJwksServer,
    bot: ControlledBot,
    fake_rasa: FakeRasa,
    fake_http_bot: FakeHttpBot,
    es256_key: PAKey,
) -> Callable[[str], Path]:
    """``probe_file(cache_url)``: the gateway file naming every fake of this module, written once."""

    def write(cache_url: str) -> Path:
        return gateway_file(
            tmp_path,
            cache_url=cache_url,
            pa=jwks_server,
            login=login_keys,
            bot=bot,
            rasa=fake_rasa,
            http_bot=fake_http_bot,
            es256_key=es256_key,
        )

    return write


@pytest.fixture
async def login_keys(brand_login: BrandLogin) -> Any:
    async with FakeJwksServer() as server:
        server.set_keys(brand_login.jwks()["keys"][0])
        yield server


async def test_probe_reports_every_target_and_how_fast(
    probe_file: Callable[[str], Path],
    redis_url: str,
    jwks_server: FakeJwksServer,
    bot: ControlledBot,
    fake_rasa: FakeRasa,
    fake_http_bot: FakeHttpBot,
) -> None:
    path = probe_file(redis_url)
    code, out, err = await check_config(path)
    assert (code, err) == (0, ""), err
    table = rows(out)
    assert set(table) == {
        ("cache", redis_url),
        ("pa keys", jwks_server.issuer),
        ("pa keys", "https://inline-pa.test"),
        ("login keys", "acme"),
        ("login keys", "globex"),
        ("bot", "acme (pact)"),
        ("bot", "globex (rasa)"),
        ("bot", "initech (http)"),
    }
    assert all(result == "ok" for result, _, _ in table.values()), out
    assert all(float(ms) >= 0 for _, ms, _ in table.values())
    assert table[("pa keys", jwks_server.issuer)][2].startswith("1 usable key(s): ES256; cached")
    assert table[("pa keys", "https://inline-pa.test")][2] == "inline: 1 usable key(s): ES256"
    assert table[("login keys", "globex")][2] == "inline: 1 usable key(s): ES256"
    assert table[("bot", "acme (pact)")][2] == "OPTIONS answered HTTP 405"
    assert table[("bot", "globex (rasa)")][2] == "Rasa REST channel: status ok"
    assert table[("bot", "initech (http)")][2] == "GET probe_url answered HTTP 200"
    assert "configuration OK; all 8 probes answered" in out
    # Nothing was sent as a turn: no bot saw a message.
    assert (bot.calls, fake_rasa.calls, fake_http_bot.calls) == ([], [], [])


async def test_probe_failures_are_rows_and_exit_2_never_a_traceback(
    probe_file: Callable[[str], Path],
    jwks_server: FakeJwksServer,
    login_keys: FakeJwksServer,
    fake_rasa: FakeRasa,
    fake_http_bot: FakeHttpBot,
) -> None:
    jwks_server.fail("error")
    login_keys.fail("not_json")
    fake_rasa.mode = "no_health"
    fake_http_bot.healthy = False
    path = probe_file(f"redis://:hunter2@127.0.0.1:{closed_port()}/3")
    raw = yaml.safe_load(path.read_text())
    refusing = closed_port()
    raw["brands"][0]["upstream"]["url"] = f"http://127.0.0.1:{refusing}/chat"
    path.write_text(yaml.safe_dump(raw))
    code, out, err = await check_config(path)
    assert code == 2
    assert "Traceback" not in out + err
    assert "hunter2" not in out + err
    assert err.strip() == "pact-gateway: 6 of 8 probes failed"
    table = rows(out)
    failed = {key: detail for key, (result, _, detail) in table.items() if result == "FAILED"}
    assert set(failed) == {
        ("cache", next(target for check, target in table if check == "cache")),
        ("pa keys", jwks_server.issuer),
        ("login keys", "acme"),
        ("bot", "acme (pact)"),
        ("bot", "globex (rasa)"),
        ("bot", "initech (http)"),
    }
    assert failed[("pa keys", jwks_server.issuer)] == "HTTP status 500"
    assert failed[("login keys", "acme")] == "body is not JSON"
    # Issue 19: the target and the cause, not an exception's class name.
    assert failed[("bot", "acme (pact)")] == f"connect: 127.0.0.1:{refusing}: connection refused"
    assert failed[("bot", "globex (rasa)")] == "status: REST channel health answered HTTP 404"
    assert failed[("bot", "initech (http)")] == "status: GET probe_url answered HTTP 503"
    assert table[("pa keys", "https://inline-pa.test")][0] == "ok"


class ContractBot(http.server.BaseHTTPRequestHandler):
    """The bot contract (docs/adapters.md) in a few lines of the standard library, as a Brand would
    first write it: ``POST`` only, so ``OPTIONS`` gets ``http.server``'s own ``501``."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"text": "Your order A-1 shipped on Monday."}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads the probe's table, not the bot's log."""


async def test_a_bot_that_follows_the_contract_passes_the_probe(probe_file: Callable[[str], Path]) -> None:
    """Issue 19 row 7: the contract promises ``POST``; a ``501`` to the probe's ``OPTIONS`` still shows the
    bot's server is there, so the row is ok and the command exits 0."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ContractBot)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        path = probe_file("memory://")
        raw = yaml.safe_load(path.read_text())
        raw["brands"][0]["upstream"]["url"] = f"http://127.0.0.1:{server.server_address[1]}/chat"
        path.write_text(yaml.safe_dump(raw))
        code, out, err = await check_config(path)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert (code, err) == (0, ""), out + err
    result, _, detail = rows(out)[("bot", "acme (pact)")]
    assert (result, detail) == ("ok", "OPTIONS answered HTTP 501 (not implemented: the server is there)")


def test_table_is_aligned_and_details_stay_on_one_line() -> None:
    results = [
        ProbeResult("cache", "memory://", True, 0.04, "PONG"),
        ProbeResult("bot", "acme (pact)", False, 12.345, "status: HTTP 500"),
    ]
    assert format_table(results).splitlines() == [
        "check  target       result    ms  detail",
        "cache  memory://    ok       0.0  PONG",
        "bot    acme (pact)  FAILED  12.3  status: HTTP 500",
    ]
