"""Configuration reload, on ``SIGHUP`` or when the watched file changes.

A reload re-reads and re-validates the whole YAML. An invalid file is logged with its YAML
path and ignored: the running configuration stays. A valid one becomes a new
:class:`~gateway.http.state.Runtime` built on the running resources and swapped in with one
assignment, so a turn already running finishes on the runtime it started with.

Some settings are bound to resources opened at start-up (sockets, the store, the key-fetch
session, the process's shutdown bound); a changed value there is logged as needing a
restart and the running value is kept, so the configuration in force always describes what
the process really does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from gateway.app import reload_runtime
from gateway.config import ConfigError, GatewayConfig, ReloadConfig, load_config_file
from gateway.http.state import RUNTIME

__all__ = ["RESTART_ONLY", "ConfigWatcher", "keep_restart_only", "reload_app"]

log = logging.getLogger("pact_gateway.reload")

RESTART_ONLY = (
    "listen",
    "cache",
    "metrics",
    "admin.host",
    "admin.port",
    "development",
    "personal_agents.jwks",
    "limits.shutdown_timeout",
    "limits.bot_answer_line_bytes",
    "limits.bot_answer_head_bytes",
    "limits.bot_answer_fields",
    "tracing",
)
"""Settings a reload cannot apply: each is bound to something opened once at start-up."""


def _setting(config: GatewayConfig, dotted: str) -> object:
    value: object = config
    for name in dotted.split("."):
        value = getattr(value, name)
    return value


def keep_restart_only(running: GatewayConfig, new: GatewayConfig) -> tuple[GatewayConfig, list[str]]:
    """``new`` with every :data:`RESTART_ONLY` setting put back to the running value, and which differed."""
    changed = [name for name in RESTART_ONLY if _setting(running, name) != _setting(new, name)]
    kept = dataclasses.replace(
        new,
        listen=running.listen,
        cache=running.cache,
        metrics=running.metrics,
        admin=dataclasses.replace(new.admin, host=running.admin.host, port=running.admin.port),
        development=running.development,
        personal_agents=dataclasses.replace(new.personal_agents, jwks=running.personal_agents.jwks),
        limits=dataclasses.replace(
            new.limits,
            shutdown_timeout=running.limits.shutdown_timeout,
            # The bot client, opened once, reads every answer with these.
            bot_answer_line_bytes=running.limits.bot_answer_line_bytes,
            bot_answer_head_bytes=running.limits.bot_answer_head_bytes,
            bot_answer_fields=running.limits.bot_answer_fields,
        ),
        tracing=running.tracing,
    )
    assert all(_setting(kept, name) == _setting(running, name) for name in RESTART_ONLY)
    return kept, changed


def reload_app(app: web.Application, path: str | Path) -> GatewayConfig | None:
    """Re-read ``path`` and swap the app's runtime; the configuration now in force, or ``None``.

    ``None`` means the file was rejected and nothing changed.
    """
    running = app[RUNTIME].current.config
    try:
        loaded = load_config_file(path)
    except ConfigError as error:
        log.error(
            "configuration reload rejected, still serving the previous configuration: %s: %s",
            path,
            error,
            extra={"config_file": str(path), "yaml_path": error.path or None},
        )
        return None
    config, changed = keep_restart_only(running, loaded)
    if changed:
        log.warning(
            "configuration reload: %s changed but needs a restart; keeping the running values",
            ", ".join(changed),
            extra={"config_file": str(path), "restart_needed": changed},
        )
    try:
        reload_runtime(app, config)
    except Exception:
        # Whatever the cause, a reload must never take the serving configuration down with it.
        log.exception("configuration reload failed, still serving the previous configuration")
        return None
    log.info(
        "configuration reloaded from %s",
        path,
        extra={"config_file": str(path), "brands": sorted(config.brands)},
    )
    return config


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


class ConfigWatcher:
    """Calls ``on_change`` when the file's modification time, size or inode changes.

    Polling (not inotify) follows Kubernetes ConfigMap updates, which swap a symlink. The
    settings are read on every round, so a reload that turns ``reload.watch`` on or off, or
    changes ``reload.interval``, takes effect without a restart.
    """

    def __init__(
        self, path: str | Path, settings: Callable[[], ReloadConfig], on_change: Callable[[], object]
    ) -> None:
        self._path = Path(path)
        self._settings = settings
        self._on_change = on_change

    async def run(self) -> None:
        last = _signature(self._path)
        while True:
            await asyncio.sleep(self._settings().interval)
            current = _signature(self._path)
            if current == last:
                continue
            last = current
            if self._settings().watch and current is not None:
                self._on_change()
