"""Optional OpenTelemetry export (``tracing:``): a server span per request under the caller's
``traceparent``, spans for the personal-agent JWT and delegation-token checks, the store steps and
the bot call, and the bot told the bot-call span is its parent. Spans are read from an in-memory
exporter, and once from a real OTLP/HTTP receiver on loopback, as configured in YAML.

With tracing off (the default) nothing of OpenTelemetry is even imported.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.config import ConfigError, TracingConfig, load_config
from gateway.ops.otel import INSTRUMENTATION, OtelSpans, tracer_provider
from gateway.ops.tracing import parse_traceparent
from gateway.process.reload import RESTART_ONLY, keep_restart_only
from tests.ops.conftest import ROOT, CapturedLogs
from tests.support.delegation import BrandLogin, enable_delegation
from tests.support.gateway import Harness, MakeGateway, base_config

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
SAMPLED = f"00-{TRACE_ID}-{PARENT_ID}-01"
TURN_SPANS = [
    "pact.verify.pa_jwt",
    "pact.store.begin_turn",
    "pact.bot.call",
    "pact.store.complete_turn",
    "POST /a2a/{brand}/message:send",
]


class Recorded:
    """The spans one gateway exported, in the order they ended."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self._exporter = exporter

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self._exporter.get_finished_spans())

    def names(self) -> list[str]:
        return [span.name for span in self.spans]

    def named(self, name: str) -> ReadableSpan:
        (span,) = [span for span in self.spans if span.name == name]
        return span

    def clear(self) -> None:
        self._exporter.clear()


Traced = Callable[..., Any]


@pytest.fixture
async def traced_gateway(make_gateway: MakeGateway) -> AsyncIterator[Traced]:
    """``await traced_gateway(sample_ratio=1.0, edit=None)``: a gateway and the spans it records."""
    providers = []

    async def start(*, sample_ratio: float = 1.0, **kwargs: Any) -> tuple[Harness, Recorded]:
        exporter = InMemorySpanExporter()
        provider = tracer_provider(TracingConfig(service_name="gw-test", sample_ratio=sample_ratio))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        providers.append(provider)
        return await make_gateway(spans=OtelSpans(provider), **kwargs), Recorded(exporter)

    yield start
    for provider in providers:
        provider.shutdown()


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


async def test_a_turn_is_a_server_span_with_its_steps_under_the_callers_trace(
    traced_gateway: Traced, json_logs: CapturedLogs
) -> None:
    h, recorded = await traced_gateway()
    response = await h.send(headers={"traceparent": SAMPLED, "tracestate": "congo=t61rcWkgMzE"})
    assert response.status == 200
    assert recorded.names() == TURN_SPANS
    server = recorded.named("POST /a2a/{brand}/message:send")
    assert server.kind is SpanKind.SERVER
    assert server.context.trace_id == int(TRACE_ID, 16)
    assert server.parent is not None
    assert server.parent.is_remote
    assert parent_of(server) == int(PARENT_ID, 16)
    assert dict(server.attributes or {}) == {
        "http.request.method": "POST",
        "http.route": "/a2a/{brand}/message:send",
        "pact.operation": "SendMessage",
        "http.response.status_code": 200,
    }
    assert server.status.status_code is StatusCode.UNSET
    for name in TURN_SPANS[:-1]:
        step = recorded.named(name)
        assert step.context.trace_id == int(TRACE_ID, 16)
        assert parent_of(step) == server.context.span_id
        assert step.status.status_code is StatusCode.UNSET
    bot = recorded.named("pact.bot.call")
    assert bot.kind is SpanKind.CLIENT
    assert dict(bot.attributes or {}) == {"pact.brand": "acme"}
    assert server.resource.attributes["service.name"] == "gw-test"
    assert server.instrumentation_scope is not None
    assert server.instrumentation_scope.name == INSTRUMENTATION
    # The bot's parent is the bot-call span; tracestate rides along unchanged.
    (call,) = h.bot.calls
    assert call.headers["traceparent"] == f"00-{TRACE_ID}-{bot.context.span_id:016x}-01"
    assert call.headers["tracestate"] == "congo=t61rcWkgMzE"
    (line,) = json_logs.access()
    assert line["trace_id"] == TRACE_ID


async def test_a_retry_has_no_bot_span_and_a_new_trace_without_traceparent(traced_gateway: Traced) -> None:
    h, recorded = await traced_gateway()
    assert (await h.send(message_id="m-1")).status == 200
    recorded.clear()
    assert (await h.send(message_id="m-1")).status == 200
    assert recorded.names() == ["pact.verify.pa_jwt", "pact.store.begin_turn", TURN_SPANS[-1]]
    server = recorded.named(TURN_SPANS[-1])
    assert server.parent is None  # no traceparent: a trace of its own
    assert {span.context.trace_id for span in recorded.spans} == {server.context.trace_id}


async def test_failures_are_errors_with_a_bounded_type(traced_gateway: Traced) -> None:
    h, recorded = await traced_gateway()
    h.bot.mode = "status500"
    assert (await h.send()).status == 500
    assert recorded.names() == [
        "pact.verify.pa_jwt",
        "pact.store.begin_turn",
        "pact.bot.call",
        "pact.store.abort_turn",
        TURN_SPANS[-1],
    ]
    bot = recorded.named("pact.bot.call")
    assert bot.status.status_code is StatusCode.ERROR
    assert (bot.attributes or {})["error.type"] == "status"
    assert bot.events == ()  # no exception message or traceback on a span
    server = recorded.named(TURN_SPANS[-1])
    assert server.status.status_code is StatusCode.ERROR
    assert (server.attributes or {})["http.response.status_code"] == 500

    recorded.clear()
    expired = await h.send(headers={"Authorization": "Bearer not-a-jwt"})
    assert expired.status == 401
    assert recorded.names() == ["pact.verify.pa_jwt", TURN_SPANS[-1]]
    assert (recorded.named("pact.verify.pa_jwt").attributes or {})["error.type"] == "malformed"
    # A refusal is the client's doing: the request's span is not an error.
    assert recorded.named(TURN_SPANS[-1]).status.status_code is StatusCode.UNSET


async def test_other_operations_and_routing_misses(traced_gateway: Traced) -> None:
    h, recorded = await traced_gateway()
    assert (await h.client.get("/a2a/acme/tasks", headers=h.auth())).status == 200
    assert recorded.names() == ["pact.verify.pa_jwt", "pact.store.rate_limits", "GET /a2a/{brand}/tasks"]
    recorded.clear()
    assert (await h.client.get("/a2a/acme/no/such/path")).status == 404
    (miss,) = recorded.spans
    assert miss.name == "GET"
    assert dict(miss.attributes or {}) == {
        "http.request.method": "GET",
        "pact.operation": "unmatched",
        "http.response.status_code": 404,
    }


async def test_s5_5_delegation_token_check_has_its_span(
    traced_gateway: Traced, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    h, recorded = await traced_gateway(edit=enable_delegation(brand_login, provider_key_pem))
    response = await h.send(headers={"X-A2A-User-Delegation": "Bearer nope"})
    assert response.status == 401
    check = recorded.named("pact.verify.delegation_token")
    assert (check.attributes or {})["error.type"] == "malformed"
    assert parent_of(check) == recorded.named(TURN_SPANS[-1]).context.span_id


async def test_sampling_follows_the_caller_then_the_ratio(traced_gateway: Traced) -> None:
    h, recorded = await traced_gateway(sample_ratio=0.0)
    unsampled = f"00-{TRACE_ID}-{PARENT_ID}-00"
    assert (await h.send(headers={"traceparent": unsampled})).status == 200
    assert (await h.send()).status == 200  # a new trace, at ratio 0
    assert recorded.spans == []
    # Not recorded, but still one trace: the bot is told the trace id and the flags.
    sent = parse_traceparent(h.bot.calls[0].headers["traceparent"])
    assert sent is not None
    assert (sent.trace_id, sent.flags) == (TRACE_ID, "00")
    assert (await h.send(headers={"traceparent": SAMPLED})).status == 200  # the caller sampled it
    assert recorded.names() == TURN_SPANS


async def test_otlp_http_export_as_configured(make_gateway: MakeGateway) -> None:
    """``tracing.otlp_endpoint`` in YAML: the gateway's spans reach a real OTLP/HTTP receiver."""
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.read())
        received.append(export)
        return web.Response(body=b"", content_type="application/x-protobuf")

    receiver = web.Application()
    receiver.router.add_post("/v1/traces", collect)
    async with TestServer(receiver, host="127.0.0.1") as server:

        def trace_to(raw: dict[str, Any]) -> None:
            raw["tracing"] = {
                "otlp_endpoint": str(server.make_url("/v1/traces")),
                "service_name": "pact-gateway-otlp-test",
            }

        h = await make_gateway(edit=trace_to)
        assert (await h.send(headers={"traceparent": SAMPLED})).status == 200
        await h.client.close()  # the app's clean-up flushes and shuts the exporter down
    spans = [
        (resource.resource, span)
        for export in received
        for resource in export.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    assert sorted(span.name for _, span in spans) == sorted(TURN_SPANS)
    assert {span.trace_id.hex() for _, span in spans} == {TRACE_ID}
    service = {
        attribute.value.string_value
        for resource, _ in spans
        for attribute in resource.attributes
        if attribute.key == "service.name"
    }
    assert service == {"pact-gateway-otlp-test"}


def test_tracing_settings_are_validated(pa_issuer: str) -> None:
    raw = base_config(pa_issuer, "https://pa.example/jwks.json", "http://bot.example/chat", "memory://")
    assert load_config(raw, {}).tracing == TracingConfig()
    for bad, path in (
        ({"otlp_endpoint": "grpc://collector:4317"}, "tracing.otlp_endpoint"),
        ({"sample_ratio": 1.5}, "tracing.sample_ratio"),
        ({"sample_ratio": -0.1}, "tracing.sample_ratio"),
        ({"service_name": ""}, "tracing.service_name"),
        ({"exporter": "zipkin"}, "tracing.exporter"),
        ({"otlp_endpoint": "http://${COLLECTOR}:4318/v1/traces"}, "tracing.otlp_endpoint"),
    ):
        with pytest.raises(ConfigError) as refused:
            load_config({**raw, "tracing": bad}, {})
        assert refused.value.path == path, bad
    configured = load_config(
        {**raw, "tracing": {"otlp_endpoint": "http://${COLLECTOR}:4318/v1/traces", "sample_ratio": 0}},
        {"COLLECTOR": "otel-collector"},
    )
    assert configured.tracing == TracingConfig("http://otel-collector:4318/v1/traces", "pact-gateway", 0.0)


def test_tracing_needs_a_restart_to_change(pa_issuer: str) -> None:
    raw = base_config(pa_issuer, "https://pa.example/jwks.json", "http://bot.example/chat", "memory://")
    running = load_config(raw, {})
    new = load_config({**raw, "tracing": {"otlp_endpoint": "http://collector:4318/v1/traces"}}, {})
    kept, changed = keep_restart_only(running, new)
    assert "tracing" in RESTART_ONLY
    assert changed == ["tracing"]
    assert kept.tracing == running.tracing


def test_tracing_off_needs_no_opentelemetry() -> None:
    """The default gateway serves with OpenTelemetry unimportable, and never loads our OTel module.

    Blocked rather than looked for in ``sys.modules``: a library may import it optionally on its
    own (redis-py does, when it is installed).
    """
    program = textwrap.dedent(
        f"""
        import asyncio, importlib.abc, sys

        class NoOpenTelemetry(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ModuleNotFoundError(name)
                return None

        sys.meta_path.insert(0, NoOpenTelemetry())
        from aiohttp.test_utils import TestClient, TestServer
        from gateway.app import create_app
        from gateway.config import load_config
        from gateway.process import server, supervisor
        from tests.support.gateway import base_config

        async def main():
            raw = base_config("https://pa.example", "https://pa.example/jwks.json", "http://127.0.0.1:9/chat",
                              "memory://")
            async with TestClient(TestServer(create_app(load_config(raw, {{}})))) as client:
                response = await client.get("/a2a/acme/tasks", headers={{"traceparent": "{SAMPLED}"}})
                assert response.status == 401
        asyncio.run(main())
        assert "gateway.ops.otel" not in sys.modules
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
