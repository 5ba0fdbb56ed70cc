"""``pact-gateway demo``: the gateway, the sample bot and a demo personal agent in one process.

The demo personal agent's key is generated at start-up; the gateway process serves its
public JWKS itself, so nothing else has to run. The printed curl session mints tokens
with ``pact-gateway token`` from the key file written here.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml
from aiohttp import web

from examples.sample_bot import create_bot_app
from gateway.app import create_app
from gateway.config import GatewayConfig, load_config
from gateway.pa_keys import generate_private_jwk, mint_token, public_jwks

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "config" / "demo.yaml"
DEMO_SUB = "demo-user-1"


def demo_config(path: Path, port: int, bot_port: int) -> GatewayConfig:
    """``config/demo.yaml`` with its loopback ports moved to the ones asked for."""
    raw: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    base = f"http://127.0.0.1:{port}"
    raw["listen"]["port"] = port
    raw["public_url"] = base
    raw["provider"]["url"] = base
    raw["personal_agents"]["registered"][0]["issuer"] = f"{base}/demo-pa"
    raw["personal_agents"]["registered"][0]["jwks_uri"] = f"{base}/demo-pa/jwks.json"
    raw["metrics"]["enabled"] = False
    for brand in raw["brands"]:
        brand["upstream"]["url"] = f"http://127.0.0.1:{bot_port}/chat"
    return load_config(raw)


def session_text(config: GatewayConfig, key_file: Path) -> str:
    """The ready-to-paste curl session: card, first turn, second turn, a retry."""
    agent = config.personal_agents.registered[0]
    brand = next(iter(config.brands))
    interface = f"{config.public_url}/a2a/{brand}"
    gateway_cmd = f"{shlex.quote(sys.executable)} -m gateway"
    token_cmd = (
        f"{gateway_cmd} token --key {shlex.quote(str(key_file))} --iss {agent.issuer} "
        f"--sub {DEMO_SUB} --aud {config.provider.audience} --ttl 300"
    )
    program = 'import json,sys; print(json.load(sys.stdin)["message"]["contextId"])'
    extract = f"{shlex.quote(sys.executable)} -c {shlex.quote(program)}"
    headers = '-H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" -H "A2A-Version: 1.0"'

    def send(message_id: str, text: str, context: bool) -> str:
        ctx = ',"contextId":"\'"$CTX"\'"' if context else ""
        parts = f'"parts":[{{"text":"{text}"}}]'
        body = f'{{"message":{{"messageId":"{message_id}","role":"ROLE_USER"{ctx},{parts}}}}}'
        return f"curl -s -X POST {interface}/message:send {headers} -d '{body}'"

    return "\n".join(
        [
            "# 1. The Agent Card (public, no token):",
            f"curl -s {interface}/.well-known/agent-card.json",
            "",
            "# 2. A personal-agent JWT (valid 300 s; run again for a fresh one):",
            f"TOKEN=$({token_cmd})",
            "",
            "# 3. First turn: no contextId, the gateway opens a conversation:",
            f"CTX=$({send('m-1', 'Hi, where is my order?', False)} | tee /dev/stderr | {extract})",
            "",
            "# 4. Second turn on the same contextId:",
            send("m-2", "It is A-10001", True),
            "",
            "# 5. A retry of m-2: the stored reply, byte for byte, without calling the bot:",
            send("m-2", "It is A-10001", True),
        ]
    )


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise RuntimeError(f"demo check failed: {what}")


async def _self_check(config: GatewayConfig, private: dict[str, Any]) -> None:
    """Run the printed session once through real HTTP and fail loudly if any step misbehaves."""
    agent = config.personal_agents.registered[0]
    token = mint_token(private, iss=agent.issuer, sub=DEMO_SUB, aud=config.provider.audience)
    interface = f"{config.public_url}/a2a/{next(iter(config.brands))}"
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}

    def message(message_id: str, text: str, context_id: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
        if context_id:
            body["contextId"] = context_id
        return {"message": body}

    async with aiohttp.ClientSession() as http:
        async with http.get(f"{interface}/.well-known/agent-card.json") as response:
            _expect(response.status == 200, f"card answered {response.status}")
        async with http.post(
            f"{interface}/message:send", json=message("m-1", "Hi", None), headers=headers
        ) as r:
            first = await r.json(content_type=None)
            _expect(r.status == 200, f"first turn answered {first}")
        context_id = first["message"]["contextId"]
        second = message("m-2", "It is A-10001", context_id)
        async with http.post(f"{interface}/message:send", json=second, headers=headers) as r:
            reply = await r.read()
            _expect(r.status == 200 and b"A-10001" in reply, f"second turn answered {reply!r}")
        async with http.post(f"{interface}/message:send", json=second, headers=headers) as r:
            _expect(await r.read() == reply, "the retry did not replay the stored reply")
    print("demo check passed: card, two turns and a retry", file=sys.stderr)


def _write_key_file(private: dict[str, Any]) -> Path:
    """The demo key on disk (mode 0600) so the printed `pact-gateway token` command can use it."""
    key_file = Path(tempfile.mkdtemp(prefix="pact-demo-")) / "demo-pa.jwk.json"
    key_file.write_text(json.dumps(private), encoding="utf-8")
    key_file.chmod(0o600)
    return key_file


def _remove_key_file(key_file: Path) -> None:
    key_file.unlink(missing_ok=True)
    key_file.parent.rmdir()


async def run_demo(config_path: str | None, *, port: int, bot_port: int, check: bool) -> int:
    config = demo_config(Path(config_path) if config_path else DEFAULT_CONFIG, port, bot_port)
    private = generate_private_jwk("ES256")
    jwks_body = orjson.dumps(public_jwks(private))
    key_file = _write_key_file(private)

    async def serve_jwks(request: web.Request) -> web.Response:
        return web.Response(body=jwks_body, content_type="application/json")

    app = create_app(config)
    app.router.add_get("/demo-pa/jwks.json", serve_jwks)
    runners = [web.AppRunner(create_bot_app(), access_log=None), web.AppRunner(app, access_log=None)]
    for runner, listen_port in zip(runners, (bot_port, port), strict=True):
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", listen_port).start()
    try:
        print(f"pact-gateway demo: gateway on {config.public_url}, sample bot on 127.0.0.1:{bot_port}\n")
        print(session_text(config, key_file), flush=True)
        if check:
            await _self_check(config, private)
            return 0
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        print("\nPress Ctrl+C to stop.", flush=True)
        await stop.wait()
        return 0
    finally:
        for runner in reversed(runners):
            await runner.cleanup()
        _remove_key_file(key_file)
