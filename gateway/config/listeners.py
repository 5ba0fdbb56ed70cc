"""The gateway's own listeners: the public one (``listen``, its trusted proxies), the operator API
(``admin``) beside it and the ops listener, and the warning ``check-config`` prints for an admin API
other machines can reach (:func:`config_warnings`).

A module of its own because its rules are about addresses, not the YAML: CIDR networks, which
addresses a host binds (a name is resolved here, the one lookup the checks make) and whether two
listeners clash on a port.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from ipaddress import IPv4Network, IPv6Network, ip_network
from typing import Any

from gateway.config.environment import _bearer_secret, _env_reference, _Environment
from gateway.config.errors import ConfigError, ConfigProblem
from gateway.config.model import AdminConfig, GatewayConfig, ListenConfig, MetricsConfig


def _listen(raw: Mapping[str, Any]) -> ListenConfig:
    """The public listener; each ``trusted_proxies`` entry an address or a network in CIDR notation."""
    networks: list[IPv4Network | IPv6Network] = []
    problems: list[ConfigProblem] = []
    for index, entry in enumerate(raw.get("trusted_proxies", [])):
        try:
            networks.append(ip_network(entry, strict=True))
        except ValueError as exc:
            problems.append(
                ConfigProblem(
                    f"listen.trusted_proxies[{index}]",
                    f"must be an IP address or a network in CIDR notation (10.0.0.0/8, fd00::/8): {exc}",
                )
            )
    if problems:
        raise ConfigError.of(problems)
    return ListenConfig(
        host=raw.get("host", "0.0.0.0"),  # noqa: S104
        port=raw.get("port", 8080),
        trusted_proxies=tuple(networks),
        forwarded_header=raw.get("forwarded_header", "X-Forwarded-For"),
        backlog=raw.get("backlog", 4096),
        ipv6_prefix=raw.get("ipv6_prefix", 64),
    )


def _admin(
    raw: Mapping[str, Any], listen: Mapping[str, Any], metrics: Mapping[str, Any], environ: _Environment
) -> AdminConfig:
    """The operator API: its token only ever ``${NAME}``, needed once enabled (and only then read, so a
    file may name it while the API stays off), too long to guess, and a listener of its own that
    shares no port with the A2A or ops listener."""
    token = raw.get("token")
    if token is not None:
        _env_reference(token, "admin.token")
    defaults = AdminConfig()
    where = {"host": raw.get("host", defaults.host), "port": raw.get("port", defaults.port)}
    if not raw.get("enabled", False):
        return AdminConfig(**where)
    if token is None:
        raise ConfigError("admin.token", "is required when admin.enabled is true: write ${NAME}")
    others: list[tuple[str, Mapping[str, Any], ListenConfig | MetricsConfig]] = [
        ("listen", listen, ListenConfig())
    ]
    if metrics.get("enabled", True) is not False:
        others.append(("metrics", metrics, MetricsConfig()))
    for name, other, default in others:
        host, port = other.get("host", default.host), other.get("port", default.port)
        if port == where["port"] != 0 and _hosts_overlap(host, where["host"]):
            raise ConfigError(
                "admin.port", f"is {name}.port on the same address ({host}:{port}): choose another"
            )
    return AdminConfig(enabled=True, token=_bearer_secret(token, "admin.token", environ), **where)


_WILDCARDS = frozenset(("0.0.0.0", "::", ""))  # noqa: S104 - compared, never bound


def _bound_addresses(host: str) -> frozenset[str] | None:
    """The addresses a listener on ``host`` binds: ``None`` for every address (a wildcard); an IP
    literal's own; a name's, as it resolves here (``localhost``: 127.0.0.1 and ::1, all of which
    the listener binds); a name that does not resolve, itself (it can only clash with itself)."""
    if host in _WILDCARDS:
        return None
    try:
        return frozenset((str(ipaddress.ip_address(host)),))
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return frozenset((host,))
    return frozenset(str(ipaddress.ip_address(str(info[4][0]).partition("%")[0])) for info in found)


def _hosts_overlap(one: str, other: str) -> bool:
    """Whether two listeners' hosts can clash on one port: either binds every address, or they share
    one, names resolved (issue 28 I5: ``localhost`` beside ``127.0.0.1`` passed as two hosts)."""
    first, second = _bound_addresses(one), _bound_addresses(other)
    return first is None or second is None or bool(first & second)


def _loopback_only(host: str) -> bool:
    """Whether a listener on ``host`` is reachable from this machine only."""
    addresses = _bound_addresses(host)
    if addresses is None:
        return False
    try:
        return all(ipaddress.ip_address(address).is_loopback for address in addresses)
    except ValueError:  # a name that did not resolve: nothing says it is local
        return False


def config_warnings(config: GatewayConfig) -> tuple[str, ...]:
    """What is allowed but most likely a mistake, for ``check-config`` to print and ``serve`` to log.

    An admin API on a non-loopback host (issue 28 I5): it lists and erases any person's
    conversations, and is then guarded by its token alone from every machine that reaches the host.
    """
    admin = config.admin
    if not admin.enabled or _loopback_only(admin.host):
        return ()
    return (
        f"admin.host: {admin.host or '(every address)'} is not a loopback address, so the admin API"
        " (a person's conversations, and their erasure) is reachable from other machines with its"
        " token alone; bind 127.0.0.1 and reach it through kubectl port-forward or an SSH tunnel",
    )
