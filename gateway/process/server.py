"""One gateway process: the A2A app, its reload, and a bounded drain on shutdown.

:func:`run_single` is ``pact-gateway serve`` with one process (the A2A listener and the ops
listener together); :func:`run_worker` is one of the ``--workers N`` processes a supervisor
starts (the A2A listener only, sharing the port through ``SO_REUSEPORT``).

The A2A listener's connections are :mod:`gateway.http.connection`'s: each request must arrive
within ``limits.request_timeout``, and requests the HTTP parser refuses get their precise status.

Shutdown (``SIGTERM``/``SIGINT``) goes through ``web.AppRunner.cleanup``: the listening
socket closes first (nothing new is accepted), requests already running get
``limits.shutdown_timeout`` seconds to finish, then whatever is left is cancelled and the
store and sessions are closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.app import JWKS, create_app
from gateway.config import GatewayConfig, config_warnings
from gateway.handlers.state import RUNTIME
from gateway.http.connection import GatewayRunner
from gateway.ops.exposition import serve_process_metrics
from gateway.ops.logs import configure_logging
from gateway.ops.metrics import Metrics
from gateway.process.admin import AdminListener
from gateway.process.health import GatewayReadiness, prefetch_keys, start_ops_listener
from gateway.process.reload import ConfigWatcher, reload_app

__all__ = ["GatewayServer", "ProcessSignals", "run_single", "run_worker", "settle_heap"]

log = logging.getLogger("pact_gateway.serve")

PARENT_CHECK_INTERVAL = 1.0
"""Seconds between a worker's looks at whether its supervisor is still alive."""
LATE_ACCEPT_GRACE = 0.1
"""Seconds between closing the listener and draining, for connections accepted at that instant."""
YOUNG_GC_THRESHOLD = 50_000
"""Net new container objects between two young-generation collections once serving (Python's default: 700).

Sized for thousands of slow turns in flight (issue 17, row 1): each holds about a hundred
container objects for the bot's whole turn, so every young collection finds nearly all it walks
alive and promotes it, and the middle generation fills with live turns. At 2,000 turns in flight
the collector took 0.53-0.71 CPU-s of a 10 s window at 10,000 (about 30 young and 3 middle
collections), 0.15-0.30 s at 50,000 (2-4), 1.3-1.6 s at 700; the gateway's CPU per turn 0.39, 0.36
and 0.47 ms; resident memory per turn in flight the same (39-40 KiB) at all three. A young
collection then pauses longer (up to about 75 ms at 2,000 in flight, once every few seconds),
which a turn of seconds does not feel; at fast-bot load the half-load p99 could not tell 2,000,
10,000 and 50,000 apart (docs/performance.md). docs/capacity.md keeps the side-by-side figures (their
slow-bot option, gateways that differed in this number only, was folded out of bench/ by issue 30)."""


class GatewayServer:
    """The gateway app of this process, listening on ``listen`` or (in a supervisor) not at all."""

    def __init__(
        self,
        config_path: Path,
        config: GatewayConfig,
        *,
        metrics: Metrics,
        listen: bool = True,
        reuse_port: bool = False,
        admin: bool = False,
    ) -> None:
        self.config_path = config_path
        self.app = create_app(config, metrics=metrics)
        # The one process that serves the admin API (single, or the supervisor; never a worker).
        self.admin = AdminListener(self.app) if admin else None
        self.draining = False
        self._listen = listen
        self._reuse_port = reuse_port
        # limits.request_timeout is read per request from the configuration in force: a reload changes it.
        self._runner = GatewayRunner(
            self.app,
            request_timeout=lambda: self.config.limits.request_timeout,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=config.limits.shutdown_timeout,
        )
        self._background: set[asyncio.Task[object]] = set()
        self._initial = config

    @property
    def config(self) -> GatewayConfig:
        """The configuration in force (the start-up one until the app has started)."""
        ref = self.app.get(RUNTIME)
        return self._initial if ref is None else ref.current.config

    def status(self) -> Mapping[str, str]:
        """Process-level readiness failures: a draining process takes no new traffic."""
        return {"shutdown": "draining"} if self.draining else {}

    async def start(self) -> None:
        """Open the resources, bind the listener, and start fetching the registered key sets."""
        await self._runner.setup()
        if self._listen:
            listen = self.config.listen
            # listen.backlog, not aiohttp's 128: thousands of agents connecting at once queue in
            # the kernel until accepted instead of being refused (or retried after 1 s) at the door.
            site = web.TCPSite(
                self._runner,
                listen.host,
                listen.port,
                backlog=listen.backlog,
                reuse_port=self._reuse_port or None,
            )
            try:
                await site.start()
            except OSError:
                await self._runner.cleanup()
                raise
        self._prefetch()

    def reload(self) -> bool:
        """Re-read the file (``SIGHUP``); ``False`` when it was rejected and nothing changed.

        Ignored before start-up finished and while draining: there is nothing to swap, or no
        new request will see it.
        """
        if self.draining or RUNTIME not in self.app:
            log.info("reload ignored: the gateway is %s", "draining" if self.draining else "starting")
            return False
        config = reload_app(self.app, self.config_path)
        if config is None:
            return False
        configure_logging(config.logging)
        self._prefetch()
        if self.admin is not None:
            self._background_task(self._open_admin(self.admin, config))
        return True

    async def start_admin(self) -> None:
        """Open the admin API's listener if ``admin.enabled``; ``OSError`` when its address is taken."""
        if self.admin is not None:
            _warn_of(self.config)
            await self.admin.apply(self.config.admin)

    async def _open_admin(self, admin: AdminListener, config: GatewayConfig) -> None:
        """After a reload that turned the admin API on: a taken port is logged, the reload stands."""
        _warn_of(config)
        try:
            await admin.apply(config.admin)
        except OSError as error:
            log.error(
                "cannot listen for the admin API on %s:%d: %s",
                config.admin.host,
                config.admin.port,
                error.strerror or error,
            )

    async def stop(self) -> None:
        """Stop accepting, let running requests finish within the bound, close everything."""
        self.draining = True
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        for site in list(self._runner.sites):
            await site.stop()
        if self.admin is not None:
            await self.admin.close()
        # A connection the kernel accepted just before the listener closed becomes an aiohttp
        # connection a few loop turns later; without this pause the drain below would not see
        # it, and its client would hang until the process exits.
        await asyncio.sleep(LATE_ACCEPT_GRACE)
        await self._runner.cleanup()

    def _prefetch(self) -> None:
        self._background_task(prefetch_keys(self.app[JWKS], self.config))

    def _background_task(self, work: Coroutine[Any, Any, object]) -> None:
        task: asyncio.Task[object] = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


class ProcessSignals:
    """``SIGTERM``/``SIGINT`` set :attr:`stop`; ``SIGHUP`` calls ``on_hup``. Removed by :meth:`close`.

    Installed before start-up and closed only once everything has stopped: a second stop
    signal during the drain (Ctrl+C reaches the whole process group, and the supervisor
    forwards one too) must not fall through to the default action and kill the process.
    """

    def __init__(self, on_hup: Callable[[], object]) -> None:
        self.stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._loop.add_signal_handler(signum, self._stop, signum)
        self._loop.add_signal_handler(signal.SIGHUP, on_hup)

    def _stop(self, signum: signal.Signals) -> None:
        if not self.stop.is_set():
            log.info("%s received: shutting down", signum.name)
        self.stop.set()

    def close(self) -> None:
        for signum in self._signals:
            self._loop.remove_signal_handler(signum)


def settle_heap() -> None:
    """Take start-up's objects out of the garbage collector's sight, and collect young objects less often.

    Called once the process has started, before it reports ready, because the cyclic
    collector's pauses stop every request in flight and were most of the gateway's tail
    latency in the benchmark:

    * ``gc.freeze()``: modules, configuration, the app, its sessions and caches live as long
      as the process, yet every full collection walked them all again (about 64,000 objects;
      the longest pause fell from 81 ms to 14 ms). A last collection first, so no start-up
      garbage is kept.
    * A young-generation threshold of :data:`YOUNG_GC_THRESHOLD` instead of 700: at 700 the
      objects of the requests in flight alone crossed the threshold, so the collector ran
      about every 20 turns and promoted live request objects towards the older generations,
      which made full collections frequent too. Only the first generation's threshold
      changes; the other two keep theirs.

    ``docs/performance.md`` ("Where the gateway's time goes") has the measurements.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])


def _cannot_listen(what: str, host: str, port: int, error: OSError) -> int:
    log.error("cannot listen for %s on %s:%d: %s", what, host, port, error.strerror or error)
    return 1


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _warn_of(config: GatewayConfig) -> None:
    """Log what ``check-config`` prints as warnings (:func:`~gateway.config.config_warnings`), where
    the admin listener is opened: by the process that owns it, once logging is set up."""
    for warning in config_warnings(config):
        log.warning("%s", warning)


async def run_single(config_path: Path, config: GatewayConfig) -> int:
    """One process: A2A listener, ops listener (when enabled), reload, drain. The exit status."""
    configure_logging(config.logging)
    metrics = Metrics()
    server = GatewayServer(config_path, config, metrics=metrics, admin=True)
    signals = ProcessSignals(server.reload)
    try:
        return await _serve_single(server, signals, metrics)
    finally:
        signals.close()


async def _serve_single(server: GatewayServer, signals: ProcessSignals, metrics: Metrics) -> int:
    config = server.config
    try:
        await server.start()
    except OSError as error:
        return _cannot_listen("A2A", config.listen.host, config.listen.port, error)
    settle_heap()  # before /readyz answers: the one long collection happens before any traffic
    ops: web.AppRunner | None = None
    if config.metrics.enabled:
        serve_process_metrics(metrics.registry)
        try:
            ops = await start_ops_listener(
                config.metrics,
                metrics.registry,
                GatewayReadiness(server.app, extra=server.status),
            )
        except OSError as error:
            await server.stop()
            return _cannot_listen("operations", config.metrics.host, config.metrics.port, error)
    try:
        await server.start_admin()
    except OSError as error:
        await server.stop()
        if ops is not None:
            await ops.cleanup()
        return _cannot_listen("the admin API", config.admin.host, config.admin.port, error)
    watcher = asyncio.create_task(
        ConfigWatcher(server.config_path, lambda: server.config.reload, server.reload).run()
    )
    log.info(
        "serving on %s:%d%s%s",
        config.listen.host,
        config.listen.port,
        f", operations on {config.metrics.host}:{config.metrics.port}" if ops is not None else "",
        f", admin API on {config.admin.host}:{config.admin.port}" if config.admin.enabled else "",
    )
    try:
        await signals.stop.wait()
    finally:
        await _cancel(watcher)
        log.info("draining in-flight requests for up to %g s", config.limits.shutdown_timeout)
        await server.stop()
        if ops is not None:
            await ops.cleanup()
    log.info("stopped")
    return 0


async def _watch_parent(parent: int, stop: asyncio.Event) -> None:
    """A worker whose supervisor died (even by SIGKILL) shuts itself down instead of lingering."""
    while True:
        await asyncio.sleep(PARENT_CHECK_INTERVAL)
        if os.getppid() != parent:
            break
    log.warning("supervisor %d is gone: shutting down", parent)
    stop.set()


async def run_worker(config_path: Path, config: GatewayConfig, ready_fd: int) -> int:
    """One of ``--workers N``: the A2A listener on the shared port; one byte on ``ready_fd`` once serving."""
    parent = os.getppid()
    configure_logging(config.logging)
    server = GatewayServer(config_path, config, metrics=Metrics(), reuse_port=True)
    signals = ProcessSignals(server.reload)
    try:
        started = False
        try:
            await server.start()
            settle_heap()  # before "serving" reaches the supervisor
            started = True
        except OSError as error:
            return _cannot_listen("A2A", config.listen.host, config.listen.port, error)
        finally:
            # One byte says "serving"; closing without it (start-up failed) says the opposite.
            with os.fdopen(ready_fd, "wb", buffering=0) as ready:
                if started:
                    ready.write(b"1")
        watchdog = asyncio.create_task(_watch_parent(parent, signals.stop))
        try:
            await signals.stop.wait()
        finally:
            await _cancel(watchdog)
            await server.stop()
        return 0
    finally:
        signals.close()
