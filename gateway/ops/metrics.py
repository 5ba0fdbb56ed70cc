"""Prometheus metrics, one registry per gateway (no process-global state).

Labels stay bounded: Brand ids and issuers come from configuration (an issuer admitted by
the ``open`` policy is counted as ``open``), operations and outcomes from fixed sets. No
``sub``, ``contextId``, raw path or token value is ever a label.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


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
            "JWKS and discovery fetches by issuer and result.",
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
            multiprocess_mode="max",
        )
        self.store_errors = Counter(
            "pact_store_errors", "Store operations that failed.", ["operation"], registry=r
        )
