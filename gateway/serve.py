"""``pact-gateway serve``: one process, or a supervisor with ``--workers N`` processes on one port.

This module only decides which of the three a process is (single, supervisor, worker) and
prepares the environment. With ``--workers N`` the supervisor makes a fresh metrics
directory and exports ``PROMETHEUS_MULTIPROC_DIR`` before anything imports
``prometheus_client`` (the library picks its value storage once, on import), so the
supervisor and every worker it spawns write there; the directory is removed on exit.
That is why the gateway modules are imported inside :func:`serve`, not at the top.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gateway.config import GatewayConfig
from gateway.process.ports import Listener, unavailable

__all__ = ["MULTIPROC_ENV", "serve"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@contextmanager
def _multiprocess_metrics() -> Iterator[str]:
    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus_client was imported before the multiprocess directory was set")
    directory = tempfile.mkdtemp(prefix="pact-gateway-metrics-")
    os.environ[MULTIPROC_ENV] = directory
    try:
        yield directory
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(directory, ignore_errors=True)


def _listeners(config: GatewayConfig) -> list[Listener]:
    listeners = [Listener("listen.port", config.listen.host, config.listen.port)]
    if config.metrics.enabled:
        listeners.append(Listener("metrics.port", config.metrics.host, config.metrics.port))
    if config.admin.enabled:
        listeners.append(Listener("admin.port", config.admin.host, config.admin.port))
    return listeners


def serve(config_path: str, config: GatewayConfig, *, workers: int = 1, ready_fd: int | None = None) -> int:
    """Run until ``SIGTERM``/``SIGINT``; the process exit status (2: refused at start-up).

    ``ready_fd`` marks a worker spawned by a supervisor: it writes one byte there once serving.
    """
    path = Path(config_path)
    if ready_fd is not None:
        from gateway.process.server import run_worker

        return asyncio.run(run_worker(path, config, ready_fd))
    if workers < 1:
        print("pact-gateway: --workers must be at least 1", file=sys.stderr)
        return 2
    busy = unavailable(_listeners(config))
    if busy:
        said = "; ".join(map(str, busy))
        print(f"pact-gateway serve: {said}; choose free ports in {config_path}", file=sys.stderr)
        return 2
    if workers == 1:
        from gateway.process.server import run_single

        return asyncio.run(run_single(path, config))
    if config.cache.backend == "memory":
        print(
            f"pact-gateway: --workers {workers} needs a shared cache, but cache.url is memory:// "
            "(one per process: conversations and retries would split across workers); "
            "use redis:// or rediss://, or run one worker",
            file=sys.stderr,
        )
        return 2
    with _multiprocess_metrics() as directory:
        from gateway.process.supervisor import run_supervisor

        return asyncio.run(run_supervisor(path, config, workers, directory))
