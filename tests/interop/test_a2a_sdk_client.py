"""Interop: the official ``a2a-sdk`` Python client (HTTP+JSON binding) against a real gateway.

The SDK, not a hand-written request, does every step a personal agent does:

- §2.1 card: ``A2ACardResolver`` fetches ``/a2a/acme/.well-known/agent-card.json`` without a
  token and parses it into the SDK's ``AgentCard``; the HTTP+JSON interface and the ``paJwt``
  Bearer scheme are what the SDK sees.
- §3 / §4 message:send: a client made by ``ClientFactory`` from that card, with the SDK's own
  ``AuthInterceptor`` and a ``CredentialService`` handing out PA JWTs for the card's scheme,
  holds a two-turn conversation (no ``contextId``, then the returned one) with the sample bot.
- §6 errors: the gateway's error envelope is mapped by the SDK to its exception classes
  (``INVALID_PARAMS`` → ``InvalidParamsError``), and a request without a token is a bare
  ``401`` that the SDK surfaces as an HTTP error.

The gateway runs self-addressed (``make_gateway(self_addressed=True)``), so ``public_url`` (and
therefore the card's interface URL the SDK follows) is the test server's real address.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    AuthInterceptor,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
    CredentialService,
    InMemoryContextCredentialStore,
)
from a2a.types.a2a_pb2 import AgentCard, Message, Part, Role, SendMessageRequest
from a2a.utils.errors import InvalidParamsError

from examples.sample_bot.bot import GREETING
from tests.support.gateway import Harness, MakeGateway

SCHEME = "paJwt"
CARD_PATH = "/a2a/acme/.well-known/agent-card.json"


@pytest.fixture
async def sdk_gw(make_gateway: MakeGateway, cache_url: str) -> Harness:
    """A gateway whose cards point at itself, on each backend in turn: memory, then the real Redis."""
    harness = await make_gateway(cache_url, self_addressed=True)
    assert str(harness.client.make_url("/")).rstrip("/") == harness.config.public_url
    return harness


@pytest.fixture
async def sdk_gw_memory(make_gateway: MakeGateway) -> Harness:
    return await make_gateway(self_addressed=True)


class SentRequests:
    """An httpx request hook recording what the SDK actually put on the wire."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> None:
        self.requests.append(request)


@pytest.fixture
def sent() -> SentRequests:
    return SentRequests()


@pytest.fixture
async def http(sent: SentRequests) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10, event_hooks={"request": [sent]}) as client:
        yield client


class HarnessTokens(CredentialService):
    """The personal agent's credential source: a fresh PA JWT for the card's ``paJwt`` scheme."""

    def __init__(self, harness: Harness) -> None:
        self._harness = harness
        self.asked: list[str] = []

    async def get_credentials(
        self, security_scheme_name: str, context: ClientCallContext | None
    ) -> str | None:
        self.asked.append(security_scheme_name)
        return self._harness.token() if security_scheme_name == SCHEME else None


def agent_base(harness: Harness) -> str:
    return f"{harness.config.public_url}/a2a/acme"


async def resolve_card(harness: Harness, http: httpx.AsyncClient) -> AgentCard:
    return await A2ACardResolver(http, agent_base(harness)).get_agent_card()


def sdk_client(http: httpx.AsyncClient, card: AgentCard, credentials: CredentialService) -> Client:
    config = ClientConfig(httpx_client=http, supported_protocol_bindings=["HTTP+JSON"], streaming=False)
    return ClientFactory(config).create(card, interceptors=[AuthInterceptor(credentials)])


async def send(client: Client, text: str, context_id: str | None = None) -> Message:
    message = Message(message_id=f"m-{uuid.uuid4().hex}", role=Role.ROLE_USER, parts=[Part(text=text)])
    if context_id is not None:
        message.context_id = context_id
    responses = [r async for r in client.send_message(SendMessageRequest(message=message))]
    assert len(responses) == 1
    (response,) = responses
    assert response.HasField("message"), response
    return response.message


async def test_s2_1_sdk_resolves_and_parses_the_card(
    sdk_gw: Harness, http: httpx.AsyncClient, sent: SentRequests
) -> None:
    card = await resolve_card(sdk_gw, http)
    assert [str(r.url) for r in sent.requests] == [f"{sdk_gw.config.public_url}{CARD_PATH}"]
    assert "Authorization" not in sent.requests[0].headers
    assert card.name == "Acme Support"
    assert [(i.protocol_binding, i.url, i.protocol_version) for i in card.supported_interfaces] == [
        ("HTTP+JSON", agent_base(sdk_gw), "1.0")
    ]
    assert list(card.security_schemes) == [SCHEME]
    scheme = card.security_schemes[SCHEME]
    assert scheme.HasField("http_auth_security_scheme")
    assert scheme.http_auth_security_scheme.scheme == "Bearer"
    assert scheme.http_auth_security_scheme.bearer_format == "JWT"
    assert [list(r.schemes) for r in card.security_requirements] == [[SCHEME]]
    assert not card.capabilities.streaming
    assert not card.capabilities.push_notifications


async def test_s4_sdk_two_turn_conversation(
    sdk_gw: Harness, http: httpx.AsyncClient, sent: SentRequests
) -> None:
    card = await resolve_card(sdk_gw, http)
    tokens = HarnessTokens(sdk_gw)
    client = sdk_client(http, card, tokens)

    first = await send(client, "Hi, where is my order?")
    assert first.role == Role.ROLE_AGENT
    assert [p.text for p in first.parts] == [GREETING]
    assert first.parts[0].text.startswith("Hi, I'm Acme's order assistant")
    context_id = first.context_id
    assert context_id

    second = await send(client, "It is A-10001", context_id)
    assert second.role == Role.ROLE_AGENT
    assert second.context_id == context_id
    assert len(second.parts) == 1
    assert "Order A-10001 is shipped" in second.parts[0].text

    # The bot ran each turn once, on one conversation, for the token's (PA, sub).
    assert [c.body["conversation_id"] for c in sdk_gw.bot.calls] == [context_id, context_id]
    assert [c.body["new_conversation"] for c in sdk_gw.bot.calls] == [True, False]
    assert [c.body["user"] for c in sdk_gw.bot.calls] == [{"pa": sdk_gw.issuer, "sub": "alice"}] * 2
    # The SDK's own auth mechanism attached the PA JWT, driven by the card's security scheme.
    assert tokens.asked == [SCHEME, SCHEME]
    operations = [r for r in sent.requests if r.url.path.endswith("/message:send")]
    assert [str(r.url) for r in operations] == [f"{agent_base(sdk_gw)}/message:send"] * 2
    assert all(r.headers["Authorization"].startswith("Bearer ey") for r in operations)
    await client.close()


async def test_s6_sdk_maps_unknown_context_to_invalid_params(
    sdk_gw: Harness, http: httpx.AsyncClient
) -> None:
    client = sdk_client(http, await resolve_card(sdk_gw, http), HarnessTokens(sdk_gw))
    with pytest.raises(InvalidParamsError) as caught:
        await send(client, "It is A-10001", "00000000-0000-4000-8000-000000000000")
    assert type(caught.value) is InvalidParamsError
    assert caught.value.message == "Unknown contextId"
    assert sdk_gw.bot.calls == []


async def test_s3_sdk_without_a_token_gets_http_401(
    sdk_gw_memory: Harness, http: httpx.AsyncClient, sent: SentRequests
) -> None:
    # The personal agent holds no credential for the card's scheme: the SDK sends no Authorization.
    client = sdk_client(http, await resolve_card(sdk_gw_memory, http), InMemoryContextCredentialStore())
    with pytest.raises(A2AClientError) as caught:
        await send(client, "Hi, where is my order?")
    assert type(caught.value) is A2AClientError
    assert "HTTP Error 401" in str(caught.value)
    cause = caught.value.__cause__
    assert isinstance(cause, httpx.HTTPStatusError)
    assert cause.response.status_code == 401
    assert cause.response.headers["WWW-Authenticate"] == 'Bearer realm="a2a"'
    assert "Authorization" not in sent.requests[-1].headers
    assert sdk_gw_memory.bot.calls == []
