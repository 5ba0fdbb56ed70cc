"""Hostile input (issue 12, deliverable 4): property-based requests against one real gateway.

Whatever a client sends (any body of ``message:send``, any value of the headers a client controls,
any query string, any path under a Brand or its OAuth issuer), the gateway never answers ``5xx``,
never puts a traceback in a body or a log record, and always answers in the shape of the answer's
class:

* an A2A result: ``application/a2a+json``; an A2A error: the exact §6 envelope, same media type,
  ``error.code`` the HTTP status and the reason's own status pair;
* authentication (§3.4, §5.5): a bare ``401`` with exactly ``WWW-Authenticate: Bearer realm="a2a"``
  (``, error="invalid_token"`` for a delegation token);
* routing: a bare ``404``, or a bare ``405`` with ``Allow``; a rate limit: a bare ``429``, ``Retry-After``;
* the §5 OAuth endpoints: RFC 6749 §5.2 JSON (``application/json``, ``Cache-Control: no-store``), the
  consent pages HTML that is ``no-store`` too.

One gateway (memory store, a delegating ``acme``, a non-delegating ``globex``) serves the whole
module. Example counts are small so the file runs in seconds; the examples are derandomized, so CI
always tries the same ones. ``HYPOTHESIS_PROFILE=explore`` runs ten times as many, randomly, for a
search by hand.
"""

from __future__ import annotations

import base64
import json
import os
import re
import string
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
import pytest
import pytest_asyncio
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDictProxy
from yarl import URL

from gateway.app import create_app
from gateway.config import RATE_RULE_NAMES, load_config
from gateway.protocol.errors import A2A_CONTENT_TYPE, Reason
from gateway.protocol.messages import MAX_ID_LENGTH
from tests.support.bot import running_bot
from tests.support.delegation import BrandLogin, enable_delegation, new_provider_key_pem
from tests.support.figures import record_figure
from tests.support.gateway import Harness, base_config
from tests.support.pa import FakeJwksServer, PAKey
from tests.support.secrets_scan import LogScan

pytestmark = pytest.mark.asyncio(loop_scope="module")

_EXPLORE = os.environ.get("HYPOTHESIS_PROFILE") == "explore"


def budget(count: int) -> settings:
    """``count`` derandomized examples (CI), or ten times as many random ones under ``explore``."""
    return settings(
        max_examples=count * 10 if _EXPLORE else count,
        deadline=None,
        derandomize=not _EXPLORE,
        database=None,  # nothing written beside the repository; a failure prints its example
        # One gateway for the module and one log scan per test, shared by every example on purpose.
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


A2A_REALM = 'Bearer realm="a2a"'
INVALID_TOKEN = 'Bearer realm="a2a", error="invalid_token"'
OAUTH_ERRORS = {
    "invalid_request",
    "invalid_client",
    "invalid_grant",
    "unsupported_grant_type",
    "invalid_scope",
    "authorization_pending",
    "slow_down",
    "access_denied",
    "expired_token",
}
"""RFC 6749 §5.2 / RFC 8628 §3.5 codes a client's mistake may earn; ``server_error`` is not one."""
_GENERATED_ID = re.compile(r"^[0-9a-f]{32}$")
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{8,128}$")


@dataclass(frozen=True)
class Answer:
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes

    @property
    def media_type(self) -> str:
        return self.headers.get("Content-Type", "").split(";")[0].strip().lower()

    def json(self) -> Any:
        return orjson.loads(self.body)


async def answer_of(response: ClientResponse) -> Answer:
    return Answer(response.status, response.headers, await response.read())


# ---- the answer classes ------------------------------------------------------------------------


def assert_sane(answer: Answer) -> None:
    """What holds for every answer: no server error, no traceback."""
    assert answer.status < 500, (answer.status, answer.body[:300])
    assert b"Traceback" not in answer.body
    assert b'File "' not in answer.body


def assert_bare(answer: Answer, status: int) -> None:
    """A bare answer: no body, and never the A2A media type (conformance notes)."""
    assert answer.status == status, (answer.status, answer.body[:300])
    assert answer.body == b""
    assert answer.media_type != A2A_CONTENT_TYPE


def assert_unauthorized(answer: Answer, challenge: str = A2A_REALM) -> None:
    """§3.4 (or §5.5): a bare 401 with exactly this challenge."""
    assert_bare(answer, 401)
    assert answer.headers.getall("WWW-Authenticate") == [challenge]


def assert_a2a_error(answer: Answer) -> Reason:
    """The exact §6 envelope; returns its reason."""
    assert answer.media_type == A2A_CONTENT_TYPE, (answer.status, answer.headers, answer.body[:300])
    doc = answer.json()
    assert set(doc) == {"error"}
    error = doc["error"]
    assert set(error) == {"code", "status", "message", "details"}
    (detail,) = error["details"]
    assert detail == {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": detail["reason"],
        "domain": "a2a-protocol.org",
    }
    reason = Reason[detail["reason"]]
    assert answer.status == error["code"] == reason.http_status
    assert error["status"] == reason.status
    assert isinstance(error["message"], str)
    assert error["message"]
    return reason


def assert_a2a_answer(answer: Answer) -> dict[str, Any] | Reason:
    """An A2A operation's answer: a ``200`` result (returned) or an error envelope (its reason)."""
    assert_sane(answer)
    if answer.status == 429:
        assert_bare(answer, 429)
        assert answer.headers["Retry-After"].isdigit()
        return Reason.INTERNAL  # never reached with this module's limits; a shape is all it promises
    if answer.status != 200:
        return assert_a2a_error(answer)
    assert answer.media_type == A2A_CONTENT_TYPE
    result: dict[str, Any] = answer.json()
    return result


def assert_oauth_answer(answer: Answer) -> None:
    """A §5 OAuth endpoint's answer to a personal agent or the Brand's back-end."""
    assert_sane(answer)
    if answer.body == b"":
        if answer.status == 401:
            assert_unauthorized(answer)
        elif answer.status == 200:  # RFC 7009 §2.2: a revocation answers 200 whatever the token was
            assert answer.headers["Cache-Control"] == "no-store"
        else:
            assert answer.status in {404, 405, 429}, answer.status
            assert_bare(answer, answer.status)
        return
    assert answer.media_type == "application/json", answer.headers
    assert answer.headers["Cache-Control"] == "no-store"
    doc = answer.json()
    if answer.status != 200:
        assert answer.status in {400, 401}, answer.status
        assert doc["error"] in OAUTH_ERRORS, doc
        assert (doc["error"] == "invalid_client") == (answer.status == 401)


def assert_any_answer(answer: Answer, path: str) -> None:
    """Whatever route ``path`` reaches (or none): the shape of the answer's class."""
    assert_sane(answer)
    if answer.status in {404, 405} and answer.media_type != A2A_CONTENT_TYPE:
        assert_bare(answer, answer.status)
        if answer.status == 405:
            assert answer.headers["Allow"]
    elif answer.status == 401 and answer.body == b"":
        assert answer.headers.getall("WWW-Authenticate") in ([A2A_REALM], [INVALID_TOKEN])
    elif answer.media_type == A2A_CONTENT_TYPE:
        assert_a2a_answer(answer)
    elif answer.media_type == "text/html":
        assert "/oauth/" in path, path
        assert answer.headers["Cache-Control"] == "no-store"
    elif "/oauth/" in path and answer.status != 200:
        assert_oauth_answer(answer)
    else:
        assert answer.status in {200, 303, 304}, (answer.status, answer.body[:300])


@dataclass
class Examples:
    """One property's examples: counted (for docs/reliability.md) and checked against the log."""

    scan: LogScan
    tried: int = 0

    def start(self) -> int:
        """Count an example; the index of the first log record it may write."""
        self.tried += 1
        return len(self.scan.records)

    def assert_no_traceback_since(self, since: int) -> None:
        logged = self.scan.tracebacks(since)
        assert not logged, [record.getMessage() for record in logged]

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("Examples()")


@pytest.fixture
def examples(secret_scan: LogScan) -> Iterator[Examples]:
    """Shared by every example of a property (Hypothesis runs them all inside one test call)."""
    counted = Examples(secret_scan)
    yield counted
    record_figure("attack", corpus="hostile input (hypothesis)", cases=counted.tried)


# ---- the gateway -------------------------------------------------------------------------------


class ModuleGateway(Harness):
    """The module's gateway; its repr stays short in Hypothesis's report of a failing example."""

    def __repr__(self) -> str:
        return "<the module's gateway>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw() -> AsyncIterator[Harness]:
    """One gateway for the module: memory store, ``acme`` delegating (with introspection), ``globex`` not."""
    key = PAKey.es256()
    async with FakeJwksServer() as jwks, running_bot() as bot:
        jwks.set_keys(key)
        raw = base_config(jwks.issuer, jwks.jwks_uri, bot.url, "memory://")
        # Thousands of requests from one User: the limits must never be what answers.
        unlimited = {"rate": 1_000_000, "burst": 1_000_000}
        raw["rate_limits"] = dict.fromkeys(RATE_RULE_NAMES, unlimited)
        edit = enable_delegation(BrandLogin(), new_provider_key_pem(), introspection={"secret": "${SECRET}"})
        edit(raw)
        config = load_config(raw, {"SECRET": "introspection-secret-" + "1234" * 4})
        client: TestClient[Any, Any] = TestClient(TestServer(create_app(config), host="127.0.0.1"))
        await client.start_server()
        try:
            yield ModuleGateway(client, bot, config, key, jwks.issuer)
        finally:
            await client.close()


# ---- strategies --------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)

# What a message's fields may hold: the right type (often) and every wrong one.
ids = st.one_of(
    st.text(min_size=1, max_size=MAX_ID_LENGTH + 4),
    st.just(" "),
    st.just("x" * (MAX_ID_LENGTH + 1)),
    json_values,
)
parts = st.one_of(
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"text": st.text(max_size=60)}),
            st.fixed_dictionaries({"text": json_values}),
            st.dictionaries(st.sampled_from(["url", "raw", "data", "file"]), json_values, min_size=1),
            st.dictionaries(st.text(max_size=8), json_values, max_size=3),
            json_values,
        ),
        max_size=4,
    ),
    json_values,
)
message_like = st.fixed_dictionaries(
    {},
    optional={
        "messageId": ids,
        "role": st.one_of(st.sampled_from(["ROLE_USER", "ROLE_AGENT", "user", ""]), json_values),
        "parts": parts,
        "contextId": st.one_of(ids, st.none()),
        "taskId": st.one_of(st.none(), ids),
        "metadata": json_values,
        "extensions": json_values,
    },
)
send_bodies = st.one_of(
    st.fixed_dictionaries({"message": message_like}, optional={"configuration": json_values}),
    st.dictionaries(st.text(max_size=10), json_values, max_size=3),
    json_values,
)
valid_messages = st.fixed_dictionaries(
    {
        "messageId": st.text(min_size=1, max_size=MAX_ID_LENGTH).filter(str.strip),
        "role": st.just("ROLE_USER"),
        "parts": st.lists(
            st.fixed_dictionaries({"text": st.text(max_size=80)}), min_size=1, max_size=3
        ).filter(lambda kept: any(part["text"].strip() for part in kept)),
    },
    optional={"metadata": json_values, "referenceTaskIds": json_values},
)

# RFC 9110 §5.5 field values: visible ASCII, space, tab and obs-text. Anything else is refused by the
# HTTP parser before the gateway sees the request; sizes stay under the parser's field limit.
field_values = st.text(
    alphabet=st.characters(codec="latin-1", exclude_categories=["Cc"]) | st.sampled_from(" \t"),
    max_size=300,
)


def _b64(value: Any) -> str:
    """``value`` as a JWS segment would carry it: base64url of its JSON, unpadded."""
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


base64url = st.text(alphabet=string.ascii_letters + string.digits + "-_", max_size=120)
bearer_values = st.one_of(
    field_values,
    st.builds(lambda v: f"Bearer {v}", field_values),
    st.builds(lambda a, b, c: f"Bearer {a}.{b}.{c}", base64url, base64url, base64url),
    st.builds(
        lambda header, payload: f"Bearer {_b64(header)}.{_b64(payload)}.c2ln", json_values, json_values
    ),
    st.sampled_from(["Bearer", "Bearer ", "bearer", "Basic dXNlcjpwYXNz", "Bearer a.b.c", "Bearer ..."]),
)

# Path segments made of what a request target may carry (RFC 3986 pchar), percent escapes included.
_PCHAR = string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@%"
segments = st.one_of(
    st.text(alphabet=_PCHAR, min_size=1, max_size=24),
    st.sampled_from(
        [
            "message:send",
            "message:stream",
            "tasks",
            "tasks:cancel",
            "extendedAgentCard",
            ".well-known",
            "agent-card.json",
            "pushNotificationConfigs",
            "oauth",
            "token",
            "device_authorization",
            "revoke",
            "introspect",
            "consent",
            "decision",
            "done",
            "jwks.json",
            "..",
            ".",
            "%2e%2e",
            "%2F",
            "%00",
            "%ff",
            "a:b",
        ]
    ),
)
brands = st.sampled_from(["acme", "globex", "unknown", "ACME", "acme%2Fglobex", "%61cme"])
paths = st.builds(
    lambda brand, rest, prefix: f"{prefix}/{brand}/" + "/".join(rest),
    brands,
    st.lists(segments, min_size=0, max_size=5),
    st.sampled_from(["/a2a", "/a2a", "/a2a", "", "/.well-known/oauth-authorization-server/a2a"]),
)
methods = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])
# "." and ".." are dot segments (RFC 3986 §5.2.4): the path they are in is another path, not a task id.
task_ids = st.text(
    alphabet=string.ascii_letters + string.digits + "-._~!$&'()*+,;=@", min_size=1, max_size=40
).filter(lambda task_id: task_id not in {".", ".."})


def page_size_oracle(raw: str) -> int | None:
    """The page size ``pageSize=raw`` asks for (README: 1–100), or ``None`` if it is not one.

    Written from the rule, not the code: a decimal integer between 1 and 100, leading zeros allowed.
    Surrounding white space is ambiguous in the rule; the caller accepts either answer for it.
    """
    if not raw or not all(c in string.digits for c in raw):
        return None
    value = int(raw.lstrip("0") or "0") if len(raw.lstrip("0")) <= 4 else 0
    return value if 1 <= value <= 100 else None


page_sizes = st.one_of(
    st.integers(min_value=-5, max_value=205).map(str),
    st.integers(min_value=1, max_value=100).map(lambda n: "0" * 3 + str(n)),
    st.text(alphabet=string.digits, min_size=1, max_size=6000),
    st.text(max_size=12),
    st.sampled_from(["", " ", "1e2", "+5", "-0", "٣", "50 ", " 50", "0x10", "1_0", "100.0", "inf"]),
    st.sampled_from(["9" * 5000, "0" * 5000 + "7", "1" + "0" * 4400]),  # past int()'s 4,300-digit guard
)

# ---- message:send ------------------------------------------------------------------------------


async def send_raw(
    gw: Harness, body: bytes, headers: Mapping[str, str] | None = None, *, brand: str = "acme"
) -> Answer:
    all_headers = {**gw.auth(), "Content-Type": "application/json", "A2A-Version": "1.0", **(headers or {})}
    response = await gw.client.post(f"/a2a/{brand}/message:send", data=body, headers=all_headers)
    return await answer_of(response)


@budget(120)
@given(body=st.binary(max_size=1500))
async def test_s6_any_bytes_as_a_message_body_get_the_envelope(
    gw: Harness, examples: Examples, body: bytes
) -> None:
    since = examples.start()
    answer = await send_raw(gw, body)
    assert_a2a_answer(answer)
    examples.assert_no_traceback_since(since)


@budget(250)
@given(doc=send_bodies)
async def test_s4_1_any_json_as_a_message_body_gets_a_reply_or_the_envelope(
    gw: Harness, examples: Examples, doc: Any
) -> None:
    since = examples.start()
    answer = await send_raw(gw, json.dumps(doc).encode())  # orjson refuses integers past 64 bits
    result = assert_a2a_answer(answer)
    if isinstance(result, dict):  # a valid turn, by chance: a §4.2 reply
        assert result["message"]["role"] == "ROLE_AGENT"
    examples.assert_no_traceback_since(since)


@budget(60)
@given(message=valid_messages)
async def test_s4_1_any_valid_message_is_answered_and_the_bot_gets_its_text(
    gw: Harness, examples: Examples, message: dict[str, Any]
) -> None:
    """Unicode ids and texts up to the longest id, extra members ignored: a reply; the bot saw the text.

    Each example's id gets a fresh prefix: an id sent before would be a retry (§4.3), answered from
    the store without a bot call.
    """
    since = examples.start()
    message = {**message, "messageId": f"{os.urandom(4).hex()}{message['messageId']}"[:MAX_ID_LENGTH]}
    answer = await send_raw(gw, json.dumps({"message": message, "configuration": {}}).encode())
    result = assert_a2a_answer(answer)
    assert isinstance(result, dict), result
    # A text the sample bot reads as an account action ("my orders") gets a §5.5 step-up task.
    answered = result["message"] if "message" in result else result["task"]
    assert isinstance(answered["contextId"], str)
    sent = gw.bot.calls[-1].body
    assert sent["message_id"] == message["messageId"]
    assert sent["text"] == "\n".join(part["text"] for part in message["parts"] if part["text"].strip())
    examples.assert_no_traceback_since(since)


# ---- headers -----------------------------------------------------------------------------------

VALID_BODY = orjson.dumps(
    {"message": {"messageId": "placeholder", "role": "ROLE_USER", "parts": [{"text": "Where is my order?"}]}}
)


def _valid_body() -> bytes:
    message_id = os.urandom(8).hex()
    return VALID_BODY.replace(b"placeholder", message_id.encode())


@budget(120)
@given(value=bearer_values)
async def test_s3_4_any_authorization_value_is_a_bare_401(
    gw: Harness, examples: Examples, value: str
) -> None:
    since = examples.start()
    answer = await send_raw(gw, _valid_body(), {"Authorization": value})
    assert_unauthorized(answer)
    examples.assert_no_traceback_since(since)


@budget(60)
@given(value=bearer_values, brand=st.sampled_from(["acme", "globex"]))
async def test_s5_5_any_delegation_header_is_a_bare_401_invalid_token(
    gw: Harness, examples: Examples, value: str, brand: str
) -> None:
    since = examples.start()
    answer = await send_raw(gw, _valid_body(), {"X-A2A-User-Delegation": value}, brand=brand)
    assert_unauthorized(answer, INVALID_TOKEN)
    examples.assert_no_traceback_since(since)


@budget(80)
@given(name=st.sampled_from(["Content-Type", "A2A-Version"]), value=field_values)
async def test_requests_are_lenient_any_content_type_or_a2a_version_is_served(
    gw: Harness, examples: Examples, name: str, value: str
) -> None:
    """Conformance notes: any ``Content-Type``, any ``A2A-Version``; the answer is still A2A."""
    since = examples.start()
    answer = await send_raw(gw, _valid_body(), {name: value})
    result = assert_a2a_answer(answer)
    assert isinstance(result, dict), result
    examples.assert_no_traceback_since(since)


@budget(80)
@given(value=field_values | st.text(alphabet=string.ascii_letters + "._:-", min_size=6, max_size=130))
async def test_x_request_id_is_echoed_only_when_well_formed(
    gw: Harness, examples: Examples, value: str
) -> None:
    """A well-formed ``X-Request-Id`` is the caller's to choose; anything else (a log-forging line,
    a huge or odd value) is replaced by a fresh id, which is what the logs then carry."""
    since = examples.start()
    answer = await send_raw(gw, _valid_body(), {"X-Request-Id": value})
    assert isinstance(assert_a2a_answer(answer), dict)
    echoed = answer.headers["X-Request-Id"]
    offered = value.strip(" \t")  # HTTP strips a field value's surrounding white space
    if _CLIENT_REQUEST_ID.match(offered):
        assert echoed == offered
    else:
        assert _GENERATED_ID.match(echoed), echoed
    examples.assert_no_traceback_since(since)


# ---- query strings -----------------------------------------------------------------------------


@budget(120)
@given(
    size=page_sizes,
    extra=st.dictionaries(
        st.text(min_size=1, max_size=10).filter(lambda k: k != "pageSize"), st.text(max_size=20), max_size=3
    ),
)
async def test_s6_any_page_size_is_a_list_or_invalid_params(
    gw: Harness, examples: Examples, size: str, extra: dict[str, str]
) -> None:
    since = examples.start()
    response = await gw.client.get("/a2a/acme/tasks", params={"pageSize": size, **extra}, headers=gw.auth())
    answer = await answer_of(response)
    result = assert_a2a_answer(answer)
    expected = page_size_oracle(size)
    if isinstance(result, dict):
        assert result == {"tasks": [], "nextPageToken": "", "pageSize": result["pageSize"], "totalSize": 0}
        assert expected == result["pageSize"] or (expected is None and size != size.strip())
    else:
        assert result is Reason.INVALID_PARAMS
        assert answer.json()["error"]["message"] == "Invalid pageSize"
        assert expected is None or size != size.strip()
    examples.assert_no_traceback_since(since)


_QUERY = string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@/?%"


@budget(100)
@given(
    query=st.text(alphabet=_QUERY, max_size=200),
    path=st.sampled_from(
        ["/a2a/acme/tasks", "/a2a/acme/message:send", "/a2a/acme/.well-known/agent-card.json"]
    ),
)
async def test_any_raw_query_string_is_ignored_or_refused_in_shape(
    gw: Harness, examples: Examples, query: str, path: str
) -> None:
    since = examples.start()
    method = "POST" if path.endswith(":send") else "GET"
    response = await gw.client.request(
        method, URL(f"{path}?{query}", encoded=True), data=_valid_body(), headers=gw.auth()
    )
    answer = await answer_of(response)
    if path.endswith("agent-card.json"):
        assert answer.status == 200  # the card ignores its query
    else:
        assert_a2a_answer(answer)
    examples.assert_no_traceback_since(since)


# ---- paths -------------------------------------------------------------------------------------


@budget(250)
@given(method=methods, path=paths, authenticated=st.booleans())
async def test_any_path_under_a_brand_gets_its_class_of_answer(
    gw: Harness, examples: Examples, method: str, path: str, authenticated: bool
) -> None:
    since = examples.start()
    headers = gw.auth() if authenticated else {}
    response = await gw.client.request(
        method, URL(path, encoded=True), data=b"", headers=headers, allow_redirects=False
    )
    answer = await answer_of(response)
    assert_any_answer(answer, path)
    if not authenticated and answer.status == 200:
        # Only the public documents answer without a token: cards, OAuth metadata, keys, landing page.
        assert method in {"GET", "HEAD"}, (method, path)
    examples.assert_no_traceback_since(since)


@budget(60)
@given(task_id=task_ids, cancel=st.booleans())
async def test_s2_2_any_task_id_is_task_not_found_naming_it(
    gw: Harness, examples: Examples, task_id: str, cancel: bool
) -> None:
    since = examples.start()
    path = f"/a2a/acme/tasks/{quote(task_id, safe='')}"
    if cancel:
        response = await gw.client.post(URL(f"{path}:cancel", encoded=True), headers=gw.auth())
    else:
        response = await gw.client.get(URL(path, encoded=True), headers=gw.auth())
    answer = await answer_of(response)
    assert assert_a2a_error(answer) is Reason.TASK_NOT_FOUND
    assert answer.json()["error"]["message"] == f"Task not found: {task_id}"
    examples.assert_no_traceback_since(since)


# ---- the OAuth endpoints -----------------------------------------------------------------------

form_fields = st.dictionaries(
    st.sampled_from(
        ["client_id", "scope", "grant_type", "device_code", "refresh_token", "token", "token_type_hint", "x"]
    ),
    st.one_of(
        st.text(max_size=40),
        st.sampled_from(
            [
                "orders:read",
                "orders:read orders:cancel",
                "orders:read  orders:read",
                "urn:ietf:params:oauth:grant-type:device_code",
                "refresh_token",
                "authorization_code",
            ]
        ),
    ),
    max_size=5,
)


@budget(150)
@given(
    endpoint=st.sampled_from(["device_authorization", "token", "revoke", "introspect"]),
    brand=st.sampled_from(["acme", "globex"]),
    fields=form_fields,
    client_is_caller=st.booleans(),
    raw_body=st.one_of(st.none(), st.binary(max_size=300)),
    content_type=st.sampled_from(
        ["application/x-www-form-urlencoded", "application/json", "text/plain", "multipart/form-data"]
    ),
)
async def test_s5_3_any_oauth_request_gets_rfc_6749_json_or_a_bare_answer(
    gw: Harness,
    examples: Examples,
    endpoint: str,
    brand: str,
    fields: dict[str, str],
    client_is_caller: bool,
    raw_body: bytes | None,
    content_type: str,
) -> None:
    since = examples.start()
    if client_is_caller:
        fields = {**fields, "client_id": gw.issuer}
    body = (
        raw_body
        if raw_body is not None
        else "&".join(f"{quote(k)}={quote(v)}" for k, v in fields.items()).encode()
    )
    response = await gw.client.post(
        f"/a2a/{brand}/oauth/{endpoint}", data=body, headers={**gw.auth(), "Content-Type": content_type}
    )
    answer = await answer_of(response)
    assert_oauth_answer(answer)
    if brand == "globex":  # no delegation: none of its OAuth routes exist
        assert_bare(answer, 404)
    examples.assert_no_traceback_since(since)


@budget(80)
@given(
    step=st.sampled_from(["consent", "consent/decision"]),
    body=st.one_of(
        st.binary(max_size=300),
        st.builds(
            lambda pairs: "&".join(f"{quote(k)}={quote(v)}" for k, v in pairs).encode(),
            st.lists(
                st.tuples(
                    st.sampled_from(["assertion", "session", "decision", "scope", "x"]),
                    st.one_of(
                        st.text(max_size=60), st.sampled_from(["allow", "deny", "orders:read"]), base64url
                    ),
                ),
                max_size=6,
            ),
        ),
    ),
)
async def test_s5_3_any_consent_post_is_the_error_page_never_a_failure(
    gw: Harness, examples: Examples, step: str, body: bytes
) -> None:
    """The browser's side of §5.3: a forged hand-off or decision is the plain error page (400, HTML)."""
    since = examples.start()
    response = await gw.client.post(
        f"/a2a/acme/oauth/{step}",
        data=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        allow_redirects=False,
    )
    answer = await answer_of(response)
    assert_sane(answer)
    assert answer.status == 400, (answer.status, answer.body[:200])
    assert answer.media_type == "text/html"
    assert answer.headers["Cache-Control"] == "no-store"
    examples.assert_no_traceback_since(since)


@budget(60)
@given(
    query=st.lists(
        st.tuples(
            st.sampled_from(["status", "scope", "r", "x"]),
            st.one_of(
                st.sampled_from(["approved", "denied", "orders:cancel", "orders:read profile:read"]),
                st.text(max_size=60),
            ),
        ),
        max_size=5,
    )
)
async def test_s5_3_no_landing_link_claims_a_grant(
    gw: Harness, examples: Examples, query: list[tuple[str, str]]
) -> None:
    """Issue 18: no crafted ``/oauth/done`` link makes the gateway's page say a grant was made or
    refused: without a decision's record, the page says only that there is nothing to show."""
    since = examples.start()
    response = await gw.client.get("/a2a/acme/oauth/done", params=query, allow_redirects=False)
    answer = await answer_of(response)
    assert_sane(answer)
    assert answer.status == 200, (answer.status, answer.body[:200])
    assert answer.media_type == "text/html"
    text = answer.body.decode()
    assert "<h1>This page has expired</h1>" in text
    assert "connected" not in text
    assert "<li>" not in text
    examples.assert_no_traceback_since(since)
