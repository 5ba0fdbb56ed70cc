"""``python -m tests.support.directline_quiet``: what ``upstream.directline.quiet_period`` costs a turn,
measured with the real Bot Framework bot (tests/support/botframework_bot.py, botbuilder-python 4.17)
behind the Direct Line fake (tests/support/fake_directline.py), through the real gateway over HTTP.

Two kinds of turn, interleaved in one run, each in a conversation of its own, with the adapter's
defaults (``poll_interval: 0.3``, ``quiet_period: 1.0``) unless told otherwise:

* ``message``: the bot answers with one message, ``inputHint: acceptingInput`` (what the SDK's
  ``send_activity("…")`` sends): the answer is complete only once ``quiet_period`` passed with
  nothing new from the bot;
* ``prompt``: the bot answers with one message, ``inputHint: expectingInput`` (a prompt): the answer
  is complete as soon as the gateway reads it.

Each turn is timed from the agent's side (the A2A request until its reply), and the medians are
printed with their difference: the cost of the quiet period to a turn that does not end with a
prompt. Everything runs on loopback in this one process, so the figures include the fake's and the
bot's own work; what differs between the two kinds is only how the answer ends.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.config import load_config
from tests.support.botframework_bot import bot_app
from tests.support.fake_directline import SECRET, FakeDirectLine
from tests.support.gateway import AUDIENCE, base_config
from tests.support.pa import FakeJwksServer, PAKey

KINDS = {"message": "hello there", "prompt": "ask about my order"}
"""What the agent says for each kind of turn (the bot's scenario is its first word)."""


async def measure(turns: int, quiet_period: float, poll_interval: float) -> dict[str, Any]:
    key = PAKey.es256()
    fake = FakeDirectLine(_tokens=(f"dlt-{index:06d}-quiet" for index in range(10 * turns + 10)))
    bot = TestServer(bot_app(), host="127.0.0.1")
    async with FakeJwksServer() as jwks:
        jwks.set_keys(key)
        await fake.start()
        await bot.start_server()
        fake.bot_url = str(bot.make_url("/api/messages"))
        raw = base_config(jwks.issuer, jwks.jwks_uri, fake.url, "memory://")
        raw["brands"][0]["upstream"] = {
            "adapter": "directline",
            "url": fake.url,
            "timeout": quiet_period + 10,
            "directline": {
                "secret": "${DIRECT_LINE_SECRET}",
                "quiet_period": quiet_period,
                "poll_interval": poll_interval,
            },
        }
        client: TestClient[Any, Any] = TestClient(
            TestServer(create_app(load_config(raw, {"DIRECT_LINE_SECRET": SECRET})), host="127.0.0.1")
        )
        await client.start_server()
        try:
            seconds = await _turns(client, key, jwks.issuer, turns)
        finally:
            await client.close()
            await fake.close()
            await bot.close()
    medians = {kind: statistics.median(values) for kind, values in seconds.items()}
    return {
        "turns_per_kind": turns,
        "quiet_period": quiet_period,
        "poll_interval": poll_interval,
        "median_seconds": medians,
        "max_seconds": {kind: max(values) for kind, values in seconds.items()},
        "quiet_period_cost_seconds": medians["message"] - medians["prompt"],
    }


async def _turns(client: TestClient[Any, Any], key: PAKey, issuer: str, turns: int) -> dict[str, list[float]]:
    contexts: dict[str, str | None] = dict.fromkeys(KINDS)
    seconds: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for index in range(turns):
        for kind, text in KINDS.items():
            message: dict[str, Any] = {
                "messageId": f"m-{kind}-{index}",
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            }
            if contexts[kind] is not None:
                message["contextId"] = contexts[kind]
            token = key.mint(issuer, "alice", AUDIENCE)
            started = time.perf_counter()
            response = await client.post(
                "/a2a/acme/message:send",
                json={"message": message},
                headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"},
            )
            doc = await response.json()
            elapsed = time.perf_counter() - started
            if response.status != 200:
                raise RuntimeError(f"a {kind} turn failed: {response.status} {doc}")
            contexts[kind] = doc["message"]["contextId"]
            seconds[kind].append(elapsed)
    return seconds


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.directline_quiet", description=__doc__)
    parser.add_argument("--turns", type=int, default=10, help="turns of each kind (default 10)")
    parser.add_argument("--quiet-period", type=float, default=1.0, help="seconds (default 1.0)")
    parser.add_argument("--poll-interval", type=float, default=0.3, help="seconds (default 0.3)")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.turns, args.quiet_period, args.poll_interval))
    medians = result["median_seconds"]
    print(
        f"median turn: {medians['message']:.2f} s for one acceptingInput message, "
        f"{medians['prompt']:.2f} s for a prompt (expectingInput): "
        f"quiet_period {args.quiet_period} costs {result['quiet_period_cost_seconds']:.2f} s"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
