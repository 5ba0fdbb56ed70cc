"""``python -m tests.support.fake_bots KIND``: one bot API's fake on loopback, as a process of its own.

The benchmark measures each adapter against its bot's fake (bench/adapters.py) from the outside,
as it measures everything: in a process of its own, so that the fake's CPU is never counted as the
gateway's, and without importing from tests/. Once it listens, the process prints one JSON line,
``{"url": …, "credential": …}``: the adapter's ``upstream.url``, and the API key or secret the fake
expects (``null`` for none). It then serves until SIGTERM or SIGINT.

The fakes are the tests' own, request-shape checks included: a request an adapter got wrong is
answered 400 and its turn fails, so it is reported as a failed turn rather than measured.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import signal
from collections.abc import Iterator, Sequence
from typing import Protocol

from tests.support.fake_directline import SECRET, FakeDirectLine
from tests.support.fake_http_bot import FakeHttpBot
from tests.support.fake_openai import API_KEY, FakeOpenAI
from tests.support.fake_rasa import FakeRasa

KINDS = ("rasa", "http", "openai", "directline")


class _Fake(Protocol):
    async def close(self) -> None: ...


def _endless_tokens() -> Iterator[str]:
    """A Direct Line token per conversation, however many conversations a benchmark run opens."""
    return (f"dlt-{index:08d}-bench" for index in itertools.count())


async def _start(kind: str) -> tuple[_Fake, str, str | None]:
    if kind == "rasa":
        rasa = FakeRasa()
        await rasa.start()
        return rasa, rasa.url, None
    if kind == "http":
        bot = FakeHttpBot()
        await bot.start()
        return bot, bot.url(), None
    if kind == "openai":
        openai = FakeOpenAI()
        await openai.start()
        return openai, openai.base_url, API_KEY
    directline = FakeDirectLine(_tokens=_endless_tokens())
    await directline.start()
    return directline, directline.url, SECRET


async def serve(kind: str) -> None:
    fake, url, credential = await _start(kind)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(json.dumps({"url": url, "credential": credential}), flush=True)
    try:
        await stop.wait()
    finally:
        await fake.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.fake_bots", description=__doc__)
    parser.add_argument("kind", choices=KINDS)
    asyncio.run(serve(parser.parse_args(argv).kind))


if __name__ == "__main__":
    main()
