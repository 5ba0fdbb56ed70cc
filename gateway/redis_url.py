"""What a Redis ``cache.url`` names: one server (``redis://``, ``rediss://``) or a Sentinel-watched primary.

Pure parsing, no I/O: :mod:`gateway.config` refuses a malformed URL at load with its reason, and
:mod:`gateway.store.redis_pipe` connects to what it names. A module of its own because the
configuration cannot import the store package (the store imports the configuration).

``redis+sentinel://[user:password@]host[:port][,host[:port]…]/service[/db][?sentinel_username=…&sentinel_password=…]``
lists the sentinels (port 26379 when left out) that watch the primary called ``service``; the
user and password are the primary's, ``sentinel_username`` and ``sentinel_password`` (percent-encoded)
the sentinels' own when they require one. Neither password is ever part of a message or a repr.

``redis+cluster://[user:password@]host[:port][,host[:port]…]`` (``rediss+cluster://``
for TLS) lists seed nodes of a Redis Cluster (port 6379 when left out): the client learns the
slot map from the first seed that answers, then connects to every primary with the same
credentials (a managed cluster has one ACL user for all its nodes). A cluster has database 0
only, so a path is refused; so is any query option: none is defined yet, and an option the
gateway silently ignored would be one the operator believes in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = [
    "CLUSTER_SCHEMES",
    "SENTINEL_PORT",
    "ClusterAddress",
    "RedisAddress",
    "SentinelAddress",
    "parse_redis_url",
]

SENTINEL_PORT = 26379
_SENTINEL_OPTIONS = frozenset({"sentinel_username", "sentinel_password"})


def _handshake(db: int, username: str | None, password: str | None) -> list[tuple[str | int, ...]]:
    commands: list[tuple[str | int, ...]] = []
    if password is not None:
        commands.append(("AUTH", username, password) if username else ("AUTH", password))
    if db:
        commands.append(("SELECT", db))
    return commands


def _db(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"the database must be a number, not {text!r}")
    return int(text)


@dataclass(frozen=True, slots=True)
class RedisAddress:
    """Where and as whom to connect, from a ``redis://`` or ``rediss://`` (TLS) URL."""

    host: str
    port: int
    db: int
    username: str | None
    password: str | None = field(repr=False)
    tls: bool

    @classmethod
    def from_url(cls, url: str) -> RedisAddress:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError(
                "must start with redis://, rediss://, redis+sentinel://, redis+cluster:// or rediss+cluster://"
            )
        try:
            port = parts.port or 6379
        except ValueError:
            raise ValueError("the port must be a number from 0 to 65535") from None
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=port,
            db=_db(parts.path.lstrip("/") or "0"),
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            tls=parts.scheme == "rediss",
        )

    def handshake(self) -> list[tuple[str | int, ...]]:
        """The commands a fresh connection sends before any other: authenticate, pick the database."""
        return _handshake(self.db, self.username, self.password)


@dataclass(frozen=True, slots=True)
class SentinelAddress:
    """A primary found by asking Redis Sentinel, from a ``redis+sentinel://`` URL (plain TCP only)."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None
    password: str | None = field(repr=False)
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    tls: bool = field(default=False, init=False)

    @classmethod
    def from_url(cls, url: str) -> SentinelAddress:
        parts = urlsplit(url)
        if parts.scheme != "redis+sentinel":
            raise ValueError("must start with redis+sentinel://")
        userinfo, _, hosts = parts.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        path = parts.path.strip("/").split("/") if parts.path.strip("/") else []
        if not 1 <= len(path) <= 2 or not path[0]:
            raise ValueError(
                "needs the service name after the sentinels: redis+sentinel://host:port/service[/db]"
            )
        options = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(set(options) - _SENTINEL_OPTIONS)
        if unknown:
            raise ValueError(f"unknown option {unknown[0]!r} (known: {', '.join(sorted(_SENTINEL_OPTIONS))})")
        if any(len(values) > 1 for values in options.values()):
            raise ValueError("each sentinel option may be given once")
        return cls(
            sentinels=tuple(_sentinel(host) for host in hosts.split(",")),
            service=unquote(path[0]),
            db=_db(path[1]) if len(path) == 2 else 0,
            username=unquote(user) or None,
            password=unquote(password) if password else None,
            sentinel_username=options.get("sentinel_username", [None])[0] or None,
            sentinel_password=options.get("sentinel_password", [None])[0] or None,
        )

    def handshake(self) -> list[tuple[str | int, ...]]:
        """What the primary's connection sends first (the sentinels' login: :meth:`sentinel_address`)."""
        return _handshake(self.db, self.username, self.password)

    def sentinel_address(self, host: str, port: int) -> RedisAddress:
        """How to reach one sentinel: its own credentials, database 0 (sentinels have no other)."""
        return RedisAddress(host, port, 0, self.sentinel_username, self.sentinel_password, tls=False)


@dataclass(frozen=True, slots=True)
class ClusterAddress:
    """A Redis Cluster, from a ``redis+cluster://`` or ``rediss+cluster://`` (TLS) URL: its seed nodes."""

    seeds: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None = field(repr=False)
    tls: bool

    @classmethod
    def from_url(cls, url: str) -> ClusterAddress:
        parts = urlsplit(url)
        if parts.scheme not in CLUSTER_SCHEMES:
            raise ValueError("must start with redis+cluster:// or rediss+cluster://")
        userinfo, _, hosts = parts.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        if parts.path.strip("/"):
            raise ValueError("a cluster has database 0 only: no path after the seed nodes")
        if parts.query:
            raise ValueError("takes no options: redis+cluster://[user:password@]host:port[,host:port...]")
        return cls(
            seeds=tuple(_host_port(host, "seed node", 6379) for host in hosts.split(",")),
            username=unquote(user) or None,
            password=unquote(password) if password else None,
            tls=parts.scheme == "rediss+cluster",
        )

    def node(self, host: str, port: int) -> RedisAddress:
        """How to reach one node of the cluster: the URL's credentials and TLS, database 0."""
        return RedisAddress(host, port, 0, self.username, self.password, self.tls)


CLUSTER_SCHEMES = frozenset({"redis+cluster", "rediss+cluster"})


def _host_port(text: str, what: str, default_port: int) -> tuple[str, int]:
    if not text:
        raise ValueError(f"needs at least one {what} host[:port], and no empty entry between commas")
    parts = urlsplit(f"//{text}")
    try:
        port = parts.port or default_port
    except ValueError:
        raise ValueError(f"{what} {text!r}: the port must be a number from 0 to 65535") from None
    if not parts.hostname:
        raise ValueError(f"{what} {text!r}: no host")
    return parts.hostname, port


def _sentinel(text: str) -> tuple[str, int]:
    return _host_port(text, "sentinel", SENTINEL_PORT)


def parse_redis_url(url: str) -> RedisAddress | SentinelAddress | ClusterAddress:
    """The address ``url`` names; if malformed, :class:`ValueError` with a reason (never a password)."""
    scheme = urlsplit(url).scheme
    if scheme == "redis+sentinel":
        return SentinelAddress.from_url(url)
    if scheme in CLUSTER_SCHEMES:
        return ClusterAddress.from_url(url)
    return RedisAddress.from_url(url)
