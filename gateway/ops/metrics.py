"""Prometheus metrics, one registry per gateway (no process-global state).

Labels stay bounded: Brand ids and issuers come from configuration (an issuer admitted by
the ``open`` policy is counted as ``open``), operations and outcomes from fixed sets. No
``sub``, ``contextId``, raw path or token value is ever a label.

With ``--workers N`` every process writes its values to files in the directory named by
``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's multiprocess mode, chosen when the library
is first imported); the supervisor's ops listener sums them with :func:`multiprocess_registry`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from gateway.config import GatewayConfig

__all__ = [
    "CLIENT_GONE",
    "LATENCY_BUCKETS",
    "MAX_CLUSTER_NODES",
    "NO_BRAND",
    "OPEN_ISSUER",
    "OTHER_NODE",
    "OTHER_OPERATION",
    "UNMATCHED",
    "DelegationEvent",
    "Metrics",
    "brand_label",
    "issuer_label",
    "mark_worker_dead",
    "multiprocess_registry",
    "operation_name",
    "outcome_for_status",
]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

NO_BRAND = "-"
"""The ``brand`` label of a request that names no configured Brand (an unknown id is never a label)."""
UNMATCHED = "unmatched"
"""The ``operation`` label of a request no route matched (a raw path is never a label)."""
OTHER_OPERATION = "other"
"""The ``operation`` label of a matched route that carries no name (e.g. the demo's own JWKS route)."""
CLIENT_GONE = 499
"""The status recorded when the client went away before the answer (nginx's convention)."""
OPEN_ISSUER = "open"
"""The ``issuer`` label of an issuer the ``open`` policy admitted: anyone can mint one."""
MAX_CLUSTER_NODES = 16
"""Redis Cluster nodes (``host:port``) that get a ``node`` label of their own; the rest count as
``other``. Nodes come from the cluster, not from configuration: a cluster resharded onto new
machines again and again would otherwise grow the label set without end."""
OTHER_NODE = "other"

_OUTCOMES: Mapping[int, str] = MappingProxyType(
    {401: "unauthorized", 404: "not_found", 405: "method_not_allowed", 429: "rate_limited"}
)


DelegationEvent = Literal[
    "authorization_started",
    "authorization_approved",
    "authorization_denied",
    "authorization_expired",
    "token_issued",
    "token_refreshed",
    "refresh_reuse_detected",
    "refresh_retried",
    "grant_revoked",
    "grant_superseded",
    "step_up",
    "delegated_turn",
    "receipt_signed",
    "invalid_delegation_token",
    "wrong_user_code",
    "authorization_details_refused",
]
"""The ``event`` label of ``pact_delegation_events``: a fixed set."""


def outcome_for_status(status: int) -> str:
    """A bounded ``outcome`` label for an HTTP status: the categories an operator alerts on."""
    if status < 400:
        return "ok"
    if status in _OUTCOMES:
        return _OUTCOMES[status]
    return "client_error" if status < 500 else "error"


def operation_name(request: web.Request) -> str:
    """The route's name (an A2A method, see :mod:`gateway.routes`), or a fixed stand-in."""
    match_info = request.match_info
    if match_info.http_exception is not None:
        return UNMATCHED
    return match_info.route.name or OTHER_OPERATION


def brand_label(config: GatewayConfig, brand_id: str | None) -> str:
    """``brand_id`` when it is a configured Brand, else ``-``: a caller cannot mint label values."""
    return brand_id if brand_id is not None and brand_id in config.brands else NO_BRAND


def issuer_label(config: GatewayConfig, issuer: str) -> str:
    """A registered issuer (enabled or not) by name; any other is ``open``."""
    return issuer if config.personal_agents.find(issuer) is not None else OPEN_ISSUER


def multiprocess_registry(directory: str) -> CollectorRegistry:
    """The scrape registry of the supervisor: every worker's values from ``directory``, summed."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]  # untyped upstream
    return registry


def mark_worker_dead(pid: int, directory: str) -> None:
    """Drop a dead worker's live-gauge files; its counters stay so totals never go backwards."""
    mark_process_dead(pid, path=directory)  # type: ignore[no-untyped-call]  # untyped upstream


class Metrics:
    """Every metric the gateway exports, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "pact_requests",
            "Requests by Brand, operation and outcome.",
            ["brand", "operation", "outcome"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "pact_request_duration_seconds",
            "Whole-request latency.",
            ["brand", "operation"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.bot_seconds = Histogram(
            "pact_bot_call_duration_seconds",
            "Latency of calls to a Brand's bot.",
            ["brand", "outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.auth_failures = Counter(
            "pact_auth_failures", "Personal-agent authentication failures by reason.", ["reason"], registry=r
        )
        self.jwks_fetches = Counter(
            "pact_jwks_fetches",
            "Personal agents' key-set (JWKS) fetches by issuer and result.",
            ["issuer", "result"],
            registry=r,
        )
        self.retries_served = Counter(
            "pact_retries_served",
            "Repeated messageIds answered from the store (§4.3).",
            ["brand"],
            registry=r,
        )
        self.rate_limited = Counter(
            "pact_rate_limited",
            "Requests refused with 429, by Brand and limit.",
            ["brand", "limit"],
            registry=r,
        )
        self.circuit_state = Gauge(
            "pact_circuit_state",
            "Bot circuit breaker: 0 closed, 1 half-open, 2 open.",
            ["brand"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.store_errors = Counter(
            "pact_store_errors", "Store operations that failed.", ["operation"], registry=r
        )
        # Redis: a turn's release that failed (a failover) is tried again in the background until
        # its marker lapses; "abandoned" ones left a message "still being processed" that long.
        self.late_releases = Counter(
            "pact_store_late_releases",
            "In-flight markers whose release failed, by what became of it: released later, or abandoned.",
            ["outcome"],
            registry=r,
        )
        # The memory store's bound (cache.max_entries); a refused conversation is counted by
        # pact_rate_limited_total{limit="store_full"}, as the other 429s are.
        self.store_entries = Gauge(
            "pact_store_entries",
            "Entries the memory store holds: conversations, retry records, indexes, counters, §5 state.",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.store_max_entries = Gauge(
            "pact_store_max_entries",
            "cache.max_entries: the entries the memory store keeps at most.",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.store_evictions = Counter(
            "pact_store_evictions",
            "Memory-store entries dropped to make room for a new conversation, by reason (expired, closed).",
            ["reason"],
            registry=r,
        )
        # Discovery happens only for issuers the open policy admitted, so no issuer label.
        self.discovery_fetches = Counter(
            "pact_oidc_discovery_fetches",
            "OIDC discovery fetches of open-policy issuers' jwks_uri, by result.",
            ["result"],
            registry=r,
        )
        # ``kind`` is discovery or jwks: the open-policy fetch budget (personal_agents.jwks.open_fetch_*).
        self.open_fetches_refused = Counter(
            "pact_open_fetches_refused",
            "Fetches for open-policy issuers not made because the process-wide fetch budget was spent.",
            ["kind"],
            registry=r,
        )
        # §5: the delegation flow. ``event`` is a fixed set (see :meth:`delegation_event`).
        self.delegation_events = Counter(
            "pact_delegation_events",
            "Delegation flow events by Brand: authorizations started, approved, denied, expired; "
            "tokens issued, refreshed; refreshes retried within the grace; refresh reuse detected; "
            "grants revoked; step-ups; delegated turns; receipts signed; invalid delegation tokens; "
            "wrong user codes at the consent hand-off.",
            ["brand", "event"],
            registry=r,
        )
        # Direct Line (gateway/upstream/directline.py): what a bot sent after its turn's answer was
        # complete, delivered with the next turn's reply or dropped (each drop also logged).
        self.directline_late_messages = Counter(
            "pact_directline_late_messages",
            "Direct Line messages a bot sent after its turn's answer was complete, by Brand and outcome: "
            "delivered (with the next turn's reply), dropped (an answer to a failed turn's message, a "
            "message after the bot ended the conversation, or past 1 MiB of owed text).",
            ["brand", "outcome"],
            registry=r,
        )
        # Redis Cluster (issue 20): what the cluster client (gateway/store/redis_cluster.py) reports.
        self.cluster_commands = Counter(
            "pact_redis_cluster_commands",
            "Redis Cluster calls by node (host:port, at most 16, then 'other') and outcome (ok, error).",
            ["node", "outcome"],
            registry=r,
        )
        self.cluster_redirects = Counter(
            "pact_redis_cluster_redirects",
            "Redis Cluster redirections by the node that answered and kind (moved, ask).",
            ["node", "kind"],
            registry=r,
        )
        self.cluster_refreshes = Counter(
            "pact_redis_cluster_map_refreshes",
            "Look-ups of the Redis Cluster slot map by outcome: ok, fallback (CLUSTER SLOTS), "
            "incomplete (slots unserved), failed (no node answered).",
            ["outcome"],
            registry=r,
        )
        self._cluster_command_children: dict[tuple[str, bool], Counter] = {}
        self._cluster_nodes: dict[str, str] = {}
        # Labelled children of the per-turn metrics, found once per label set and kept: a
        # ``.labels()`` call stringifies every value and takes the metric's lock on each use.
        # Bounded because every label is (see the module docstring), and never larger than
        # the children prometheus-client itself keeps. In multiprocess mode a child's value
        # lives in this process's own file, which the child finds again after a fork, so
        # keeping it is as correct as looking it up.
        self._request_children: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}
        self._bot_children: dict[tuple[str, str], Histogram] = {}
        self._auth_children: dict[str, Counter] = {}
        # Every delegated turn counts two events (``delegated_turn``, ``receipt_signed``).
        self._delegation_children: dict[tuple[str, str], Counter] = {}

    def observe_request(self, brand: str, operation: str, outcome: str, seconds: float) -> None:
        """One finished request; the caller has already bounded every label."""
        key = (brand, operation, outcome)
        children = self._request_children.get(key)
        if children is None:
            children = (
                self.requests.labels(brand, operation, outcome),
                self.request_seconds.labels(brand, operation),
            )
            self._request_children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def observe_bot_call(self, brand: str, outcome: str, seconds: float) -> None:
        """One call to a Brand's bot: ``ok`` or the adapter's bounded failure reason."""
        key = (brand, outcome)
        child = self._bot_children.get(key)
        if child is None:
            child = self._bot_children[key] = self.bot_seconds.labels(brand, outcome)
        child.observe(seconds)

    def auth_failed(self, reason: str) -> None:
        """A refused token (§3.4); ``reason`` is one of the fixed :data:`AuthReason` values."""
        child = self._auth_children.get(reason)
        if child is None:
            child = self._auth_children[reason] = self.auth_failures.labels(reason)
        child.inc()

    def jwks_fetched(self, issuer: str, *, ok: bool) -> None:
        """One key-set fetch; ``issuer`` must already be an :func:`issuer_label`."""
        self.jwks_fetches.labels(issuer, "ok" if ok else "error").inc()

    def retry_served(self, brand: str) -> None:
        """A retried ``messageId`` answered from the store without calling the bot (§4.3)."""
        self.retries_served.labels(brand).inc()

    def store_error(self, operation: str) -> None:
        """A store call that raised :class:`StoreError` (``begin_turn``, ``complete_turn`` …)."""
        self.store_errors.labels(operation).inc()

    def late_release(self, outcome: str) -> None:
        """A release tried again in the background: ``released``, or ``abandoned`` when its marker lapsed."""
        self.late_releases.labels(outcome).inc()

    def store_size(self, entries: int, max_entries: int) -> None:
        """The memory store's size and bound, each sweep tick (as its ``KeyspaceObserver``)."""
        self.store_entries.set(entries)
        self.store_max_entries.set(max_entries)

    def store_evicted(self, reason: str) -> None:
        """One memory-store entry dropped for room: ``expired`` or ``closed``."""
        self.store_evictions.labels(reason).inc()

    def delegation_event(self, brand: str, event: DelegationEvent) -> None:
        """One §5 flow event for a configured Brand."""
        key = (brand, event)
        child = self._delegation_children.get(key)
        if child is None:
            child = self._delegation_children[key] = self.delegation_events.labels(brand, event)
        child.inc()

    def discovery_fetched(self, ok: bool) -> None:
        """One OIDC discovery fetch (``open`` policy): ``ok`` when it yielded a usable ``jwks_uri``."""
        self.discovery_fetches.labels("ok" if ok else "error").inc()

    def open_fetch_refused(self, kind: str) -> None:
        """A fetch for an ``open``-policy issuer the fetch budget refused: ``discovery`` or ``jwks``."""
        self.open_fetches_refused.labels(kind).inc()

    def _node_label(self, node: str) -> str:
        label = self._cluster_nodes.get(node)
        if label is None:
            label = node if len(self._cluster_nodes) < MAX_CLUSTER_NODES else OTHER_NODE
            self._cluster_nodes[node] = label
        return label

    def cluster_command(self, node: str, ok: bool) -> None:
        """A Redis Cluster call answered by ``node`` (``host:port``), or failed there."""
        key = (node, ok)
        child = self._cluster_command_children.get(key)
        if child is None:
            child = self.cluster_commands.labels(self._node_label(node), "ok" if ok else "error")
            self._cluster_command_children[key] = child
        child.inc()

    def cluster_redirect(self, node: str, kind: str) -> None:
        """``node`` redirected a call: ``moved`` or ``ask``."""
        self.cluster_redirects.labels(self._node_label(node), kind).inc()

    def cluster_refresh(self, outcome: str) -> None:
        """One look-up of the slot map: ``ok``, ``fallback``, ``incomplete`` or ``failed``."""
        self.cluster_refreshes.labels(outcome).inc()
