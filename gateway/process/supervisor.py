"""``pact-gateway serve --workers N``: a supervisor and N worker processes on one port.

Each worker is ``python -m gateway serve`` of the same file, binding ``listen`` with
``SO_REUSEPORT`` so the kernel spreads connections across them. The supervisor:

* runs the one ops listener: ``/metrics`` sums every process's values from the
  prometheus-client multiprocess directory and adds each process's ``process_*`` series (read
  from ``/proc``, labelled ``process`` and ``pid``), ``/readyz`` checks its own configuration,
  store connection and key sets plus that every worker is serving;
* forwards ``SIGHUP`` after validating the file itself (a rejected file is logged once and
  never reaches the workers), and ``SIGTERM``/``SIGINT`` (each worker drains within
  ``limits.shutdown_timeout``; one still running after that and a grace period is killed);
* restarts a worker that dies while serving (after a pause, so a crash loop cannot spin),
  and marks its metrics files dead; a worker that cannot start at all stops the gateway.

Workers notice a supervisor that died without a word and shut themselves down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from gateway.config import GatewayConfig
from gateway.ops.exposition import ProcessGroup
from gateway.ops.logs import configure_logging
from gateway.ops.metrics import Metrics, mark_worker_dead, multiprocess_registry
from gateway.process.health import GatewayReadiness, start_ops_listener
from gateway.process.reload import ConfigWatcher
from gateway.process.server import GatewayServer, ProcessSignals

__all__ = ["Supervisor", "run_supervisor"]

log = logging.getLogger("pact_gateway.supervisor")

START_TIMEOUT = 60.0
"""Seconds a worker gets from spawn to serving before the start counts as failed."""
KILL_GRACE = 5.0
"""Seconds past ``limits.shutdown_timeout`` before a worker that is still draining is killed."""
RESTART_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Pauses before restarting a worker that keeps dying; reset once one serves for a minute."""
STABLE_AFTER = 60.0


@dataclass(slots=True)
class _Worker:
    index: int
    process: asyncio.subprocess.Process | None = None
    serving: bool = False
    started_at: float = 0.0
    failures: int = 0
    generation: int = 0  # the supervisor's reload count when this process read the file


class Supervisor:
    """Starts, watches, signals and stops the workers; serves their aggregated metrics."""

    def __init__(self, config_path: Path, config: GatewayConfig, workers: int, metrics_dir: str) -> None:
        self._path = config_path
        self._config = config
        self._metrics_dir = metrics_dir
        self._workers = [_Worker(index) for index in range(workers)]
        self._stopping = False
        self._generation = 0
        # The supervisor's own gateway app listens nowhere: it is what /readyz checks (store,
        # key sets, configuration) and what validates a reloaded file before the workers see it.
        self._gateway = GatewayServer(config_path, config, metrics=Metrics(), listen=False, admin=True)

    def status(self) -> dict[str, str]:
        """Readiness failures of the process group: draining, or workers not (yet) serving."""
        failing = dict(self._gateway.status())
        if self._stopping:
            failing["shutdown"] = "draining"
        serving = sum(worker.serving for worker in self._workers)
        if serving < len(self._workers):
            failing["workers"] = f"{serving} of {len(self._workers)} serving"
        return failing

    def processes(self) -> list[tuple[str, int]]:
        """The group's live processes for ``process_*`` (:class:`ProcessGroup`): this one, then each worker.

        Read from the scrape's thread: a worker replaced meanwhile is at worst missing from one scrape.
        """
        live = [("supervisor", os.getpid())]
        for worker in self._workers:
            process = worker.process
            if process is not None and process.returncode is None:
                live.append((f"worker-{worker.index}", process.pid))
        return live

    def reload(self) -> None:
        """Validate and apply the file here first; only a file the supervisor accepted is forwarded."""
        if not self._stopping and self._gateway.reload():
            self._generation += 1
            for worker in self._workers:
                # A worker still starting has no SIGHUP handler yet (the default action kills);
                # it is signalled once it serves, see _start.
                if worker.serving:
                    self._send(worker, signal.SIGHUP)
                    worker.generation = self._generation

    async def run(self) -> int:
        # Signals first and last: see ProcessSignals for why they outlive the drain.
        signals = ProcessSignals(self.reload)
        ops: web.AppRunner | None = None
        metrics = self._config.metrics
        try:
            await self._gateway.start()
            if metrics.enabled:
                registry = multiprocess_registry(self._metrics_dir)
                registry.register(ProcessGroup(self.processes))
                ops = await start_ops_listener(
                    metrics,
                    registry,
                    GatewayReadiness(self._gateway.app, extra=self.status),
                )
        except OSError as error:
            log.error("cannot listen for operations on %s:%d: %s", metrics.host, metrics.port, error)
            return 1
        else:
            try:
                await self._gateway.start_admin()
            except OSError as error:
                admin = self._config.admin
                log.error("cannot listen for the admin API on %s:%d: %s", admin.host, admin.port, error)
                return 1
            return await self._serve(signals)
        finally:
            self._stopping = True
            # Normally all stopped already; after an unexpected error, never leave one behind.
            await asyncio.gather(
                *(self._terminate(w) for w in self._workers if w.process and w.process.returncode is None)
            )
            if ops is not None:
                await ops.cleanup()
            await self._gateway.stop()
            signals.close()

    async def _serve(self, signals: ProcessSignals) -> int:
        watcher = asyncio.create_task(
            ConfigWatcher(self._path, lambda: self._gateway.config.reload, self.reload).run()
        )
        try:
            started = await asyncio.gather(*(self._start(worker) for worker in self._workers))
            if not all(started):
                log.error("a worker could not start: stopping")
                await self._stop_workers()
                return 1
            listen = self._config.listen
            log.info("serving on %s:%d with %d workers", listen.host, listen.port, len(self._workers))
            watchers = [asyncio.create_task(self._keep(worker)) for worker in self._workers]
            await signals.stop.wait()
            self._stopping = True
            log.info("draining: forwarding the stop to the workers")
            for task in watchers:
                task.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
            return await self._stop_workers()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _start(self, worker: _Worker) -> bool:
        """Spawn ``worker`` and wait until it serves; ``False`` if it died or hung instead."""
        read_fd, write_fd = os.pipe()
        worker.generation = self._generation
        try:
            worker.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gateway",
                "serve",
                "--config",
                str(self._path),
                "--worker-ready-fd",
                str(write_fd),
                pass_fds=(write_fd,),
                stdin=asyncio.subprocess.DEVNULL,
            )
        finally:
            os.close(write_fd)
        worker.started_at = asyncio.get_running_loop().time()
        try:
            ready = await asyncio.wait_for(_read_ready(read_fd), START_TIMEOUT)
        except TimeoutError:
            ready = False
        finally:
            os.close(read_fd)
        worker.serving = ready
        if ready:
            log.info("worker %d serving (pid %d)", worker.index, worker.process.pid)
            if worker.generation != self._generation:
                self._send(worker, signal.SIGHUP)  # a reload happened while it was starting
                worker.generation = self._generation
        return ready

    async def _keep(self, worker: _Worker) -> None:
        """Wait for ``worker`` to exit and start it again (unless the gateway is stopping)."""
        loop = asyncio.get_running_loop()
        while True:
            assert worker.process is not None
            code = await worker.process.wait()
            worker.serving = False
            mark_worker_dead(worker.process.pid, self._metrics_dir)
            lived = loop.time() - worker.started_at
            worker.failures = 0 if lived >= STABLE_AFTER else worker.failures
            delay = RESTART_DELAYS[min(worker.failures, len(RESTART_DELAYS) - 1)]
            worker.failures += 1
            log.error(
                "worker %d (pid %d) exited with status %s; restarting in %g s",
                worker.index,
                worker.process.pid,
                code,
                delay,
            )
            await asyncio.sleep(delay)
            if not await self._start(worker):
                log.error("worker %d did not start again", worker.index)
                await self._terminate(worker)

    @staticmethod
    def _send(worker: _Worker, signum: signal.Signals) -> None:
        if worker.process is not None and worker.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signum)

    async def _terminate(self, worker: _Worker) -> int:
        """Stop one worker: SIGTERM, then SIGKILL after the drain bound and a grace period."""
        process = worker.process
        if process is None:
            return 0
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(process.wait(), self._config.limits.shutdown_timeout + KILL_GRACE)
        except TimeoutError:
            log.error("worker %d (pid %d) did not stop in time: killing it", worker.index, process.pid)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            code = await process.wait()
        worker.serving = False
        mark_worker_dead(process.pid, self._metrics_dir)
        return code

    async def _stop_workers(self) -> int:
        codes = await asyncio.gather(*(self._terminate(worker) for worker in self._workers))
        # -SIGTERM: a worker stopped before it had installed its handlers (still starting).
        failed = [code for code in codes if code not in (0, -signal.SIGTERM)]
        if failed:
            log.error("workers exited with status %s", ", ".join(map(str, failed)))
        log.info("stopped")
        return 0 if not failed else 1


async def _read_ready(read_fd: int) -> bool:
    """Wait for the worker's one byte (serving) or end of file (it exited first)."""
    loop = asyncio.get_running_loop()
    result: asyncio.Future[bool] = loop.create_future()

    def readable() -> None:
        loop.remove_reader(read_fd)
        if not result.done():
            result.set_result(os.read(read_fd, 1) == b"1")

    loop.add_reader(read_fd, readable)
    try:
        return await result
    finally:
        loop.remove_reader(read_fd)


async def run_supervisor(config_path: Path, config: GatewayConfig, workers: int, metrics_dir: str) -> int:
    """``serve --workers N`` (N > 1) in the supervisor process; the exit status."""
    configure_logging(config.logging)
    return await Supervisor(config_path, config, workers, metrics_dir).run()
