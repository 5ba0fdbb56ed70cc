"""What one Redis script call costs the calling process: redis-py's pooled client beside the gateway's pipe.

Why it exists: the Redis backend's turn is two script calls, and the client's own per-command
work (not Redis, not the network) was most of what the Redis front cost above the memory
front. Both clients run the same ``EVALSHA`` (the shape of a continue-turn script: an
``HMGET`` and an ``HSET`` on a conversation hash) from ``--concurrency`` tasks, in rounds that
alternate between the clients, and the process's CPU (``time.process_time``) per call is
reported, median over rounds. The Redis server's CPU is not counted here; the benchmark's
peak rounds report it per turn.

``python -m bench.redis_client --redis-url redis://127.0.0.1:6379/14`` prints one JSON document.
It writes keys ``bench:client:*`` in that database and deletes them afterwards.

``--cluster-url redis+cluster://host:port[,…]`` measures the same on a Redis Cluster (issue 20):
redis-py's asyncio ``RedisCluster`` beside the gateway's :class:`ClusterPipe` (one
:class:`RedisPipe` per primary), each key with a hash tag of its own so the calls spread over
every primary. Its keys (``bench:client:{…}``) are deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as aioredis

from gateway.redis_url import ClusterAddress
from gateway.store.redis_cluster import ClusterPipe
from gateway.store.redis_pipe import DEFAULT_TIMEOUT, RedisAddress, RedisPipe, Script

SCRIPT = Script(
    """
local v = redis.call('HMGET', KEYS[1], 'o', 'c', 'l', ARGV[2], 'a')
redis.call('HSET', KEYS[1], ARGV[2], 'P' .. ARGV[3])
return {'new', v[5]}
"""
)
Call = Callable[[str, str], Awaitable[Any]]


async def _round(call: Call, calls: int, concurrency: int) -> float:
    """CPU microseconds per call, over ``calls`` calls spread across ``concurrency`` tasks."""

    async def worker(task: int) -> None:
        for turn in range(calls // concurrency):
            await call(f"bench:client:{task}", f"m:{turn}")

    started = time.process_time()
    await asyncio.gather(*(worker(task) for task in range(concurrency)))
    return (time.process_time() - started) / (calls // concurrency * concurrency) * 1e6


async def _compare(
    clients: dict[str, Call], calls: int, concurrency: int, rounds: int
) -> dict[str, list[float]]:
    """Rounds alternating between ``clients``: each one's CPU µs per call, one sample per round."""
    samples: dict[str, list[float]] = {name: [] for name in clients}
    for call in clients.values():  # connect, load the script, fill the pool
        await _round(call, concurrency, concurrency)
    for _ in range(rounds):
        for name, call in clients.items():
            samples[name].append(await _round(call, calls, concurrency))
    return samples


def _report(samples: dict[str, list[float]], calls: int, concurrency: int, rounds: int) -> dict[str, Any]:
    redis_py_us = statistics.median(samples["redis_py"])
    pipe_us = statistics.median(samples["pipe"])
    return {
        "redis_py_cpu_us_per_call": redis_py_us,
        "pipe_cpu_us_per_call": pipe_us,
        "redis_py_vs_pipe_ratio": redis_py_us / pipe_us if pipe_us > 0 else 0.0,
        "samples_us": samples,
        "calls_per_round": calls,
        "concurrency": concurrency,
        "rounds": rounds,
    }


async def measure(redis_url: str, calls: int, concurrency: int, rounds: int) -> dict[str, Any]:
    redis_py = aioredis.Redis.from_url(redis_url, socket_timeout=DEFAULT_TIMEOUT, health_check_interval=30)
    registered = redis_py.register_script(SCRIPT.source)
    pipe = RedisPipe(RedisAddress.from_url(redis_url))

    async def through_redis_py(key: str, field: str) -> Any:
        return await registered(keys=[key], args=["owner", field, 1])

    async def through_pipe(key: str, field: str) -> Any:
        return await pipe.run(SCRIPT, [key], ["owner", field, 1])

    try:
        samples = await _compare(
            {"redis_py": through_redis_py, "pipe": through_pipe}, calls, concurrency, rounds
        )
        keys = [key async for key in redis_py.scan_iter(match="bench:client:*")]
        if keys:
            await redis_py.delete(*keys)
    finally:
        await pipe.close()
        await redis_py.aclose()
    return _report(samples, calls, concurrency, rounds)


async def measure_cluster(cluster_url: str, calls: int, concurrency: int, rounds: int) -> dict[str, Any]:
    """The same, on a Redis Cluster: redis-py's ``RedisCluster`` beside :class:`ClusterPipe`."""
    address = ClusterAddress.from_url(cluster_url)
    host, port = address.seeds[0]
    redis_py = aioredis.RedisCluster(
        host=host,
        port=port,
        username=address.username,
        password=address.password,
        ssl=address.tls,
        socket_timeout=DEFAULT_TIMEOUT,
    )
    registered = redis_py.register_script(SCRIPT.source)
    pipe = ClusterPipe(address, timeout=DEFAULT_TIMEOUT)

    async def through_redis_py(key: str, field: str) -> Any:
        return await registered(keys=[_tagged(key)], args=["owner", field, 1])

    async def through_pipe(key: str, field: str) -> Any:
        return await pipe.run(SCRIPT, [_tagged(key)], ["owner", field, 1])

    try:
        samples = await _compare(
            {"redis_py": through_redis_py, "pipe": through_pipe}, calls, concurrency, rounds
        )
        for task in range(concurrency):
            await pipe.execute("DEL", _tagged(f"bench:client:{task}"))
    finally:
        await pipe.close()
        await redis_py.aclose()
    return _report(samples, calls, concurrency, rounds)


def _tagged(key: str) -> str:
    """``bench:client:<task>`` with the task as its hash tag: the tasks' keys spread over the slots."""
    prefix, _, task = key.rpartition(":")
    return f"{prefix}:{{{task}}}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--calls", type=int, default=20_000, help="script calls per round and client")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per client, alternating")
    parser.add_argument(
        "--cluster-url", help="a redis+cluster:// URL: compare RedisCluster with ClusterPipe there instead"
    )
    args = parser.parse_args(argv)
    if args.cluster_url:
        result = asyncio.run(measure_cluster(args.cluster_url, args.calls, args.concurrency, args.rounds))
    else:
        result = asyncio.run(measure(args.redis_url, args.calls, args.concurrency, args.rounds))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
