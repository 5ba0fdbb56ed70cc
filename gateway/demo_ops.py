"""What the demo shows of its own operation: the access lines on stderr and ``/metrics`` on loopback.

A first look at the gateway should show what an operator will see, so the demo logs as
``config/demo.yaml`` says (text lines on stderr, one per request) and runs the same ops listener
as ``serve`` (``/metrics``, ``/healthz``, ``/readyz``) on ``127.0.0.1``, at ``metrics.port``
(9090) or, when that port is taken (another demo, a local Prometheus), on a free one: the demo
must start anyway, and it prints where.
"""

from __future__ import annotations

import dataclasses
import errno
from typing import NamedTuple

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import MetricsConfig
from gateway.ops.exposition import serve_process_metrics
from gateway.ops.metrics import Metrics
from gateway.process.health import GatewayReadiness, start_ops_listener

__all__ = ["DemoOps", "count_requests", "start_demo_ops"]

LOOPBACK = "127.0.0.1"


class DemoOps(NamedTuple):
    """The demo's ops listener (cleaned up with the other runners) and where its ``/metrics`` is."""

    runner: web.AppRunner
    metrics_url: str
    preferred_port_taken: bool


async def start_demo_ops(gateway: web.Application, metrics: Metrics, config: MetricsConfig) -> DemoOps:
    """The ops listener for the demo's ``gateway`` (whose registry is ``metrics``), on loopback."""
    serve_process_metrics(metrics.registry)
    readiness = GatewayReadiness(gateway)
    wanted = dataclasses.replace(config, host=LOOPBACK)
    taken = False
    try:
        runner = await start_ops_listener(wanted, metrics.registry, readiness)
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise
        taken = True
        runner = await start_ops_listener(dataclasses.replace(wanted, port=0), metrics.registry, readiness)
    port = runner.addresses[0][1]
    return DemoOps(runner, f"http://{LOOPBACK}:{port}/metrics", taken)


async def count_requests(metrics_url: str) -> float:
    """The ``pact_requests_total`` a scrape of ``metrics_url`` reports (what ``demo --check`` prints)."""
    async with aiohttp.ClientSession() as http, http.get(metrics_url) as response:
        response.raise_for_status()
        text = await response.text()
    return sum(
        point.value
        for family in text_string_to_metric_families(text)
        for point in family.samples
        if point.name == "pact_requests_total"
    )
