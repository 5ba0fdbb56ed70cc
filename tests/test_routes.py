"""§2.2 route table, through HTTP: every row, every miss, and the order of checks."""

from __future__ import annotations

import orjson
import pytest

from tests.support.gateway import Harness

A2A_JSON = "application/a2a+json"


def reason(body: bytes) -> tuple[int, str, str]:
    error = orjson.loads(body)["error"]
    return error["code"], error["details"][0]["reason"], error["message"]


@pytest.mark.parametrize(
    ("method", "path", "status", "why", "message"),
    [
        ("GET", "tasks/t-1", 404, "TASK_NOT_FOUND", "Task not found: t-1"),
        ("POST", "tasks/t-1:cancel", 404, "TASK_NOT_FOUND", "Task not found: t-1"),
        ("POST", "message:stream", 400, "UNSUPPORTED_OPERATION", "Streaming is not supported"),
        ("POST", "tasks/t-1:subscribe", 400, "UNSUPPORTED_OPERATION", "Streaming is not supported"),
        ("GET", "extendedAgentCard", 400, "UNSUPPORTED_OPERATION", "Extended agent card is not supported"),
        ("GET", "tasks/t-1/pushNotificationConfigs", 400, "PUSH_NOTIFICATION_NOT_SUPPORTED", None),
        ("POST", "tasks/t-1/pushNotificationConfigs", 400, "PUSH_NOTIFICATION_NOT_SUPPORTED", None),
        ("GET", "tasks/t-1/pushNotificationConfigs/c-1", 400, "PUSH_NOTIFICATION_NOT_SUPPORTED", None),
        ("DELETE", "tasks/t-1/pushNotificationConfigs/c-1", 400, "PUSH_NOTIFICATION_NOT_SUPPORTED", None),
    ],
)
async def test_s2_2_operation_rows(
    gw_memory: Harness, method: str, path: str, status: int, why: str, message: str | None
) -> None:
    response = await gw_memory.client.request(method, f"/a2a/acme/{path}", headers=gw_memory.auth())
    assert response.status == status
    assert response.headers["Content-Type"] == A2A_JSON
    code, got_reason, got_message = reason(await response.read())
    assert (code, got_reason) == (status, why)
    if message is not None:
        assert got_message == message


async def test_s2_2_list_tasks_is_empty(gw_memory: Harness) -> None:
    response = await gw_memory.client.get("/a2a/acme/tasks", headers=gw_memory.auth())
    assert response.status == 200
    assert response.headers["Content-Type"] == A2A_JSON
    assert orjson.loads(await response.read()) == {
        "tasks": [],
        "nextPageToken": "",
        "pageSize": 50,
        "totalSize": 0,
    }
    response = await gw_memory.client.get("/a2a/acme/tasks?pageSize=100&status=x", headers=gw_memory.auth())
    assert orjson.loads(await response.read())["pageSize"] == 100


@pytest.mark.parametrize("size", ["0", "101", "x", ""])
async def test_s2_2_bad_page_size(gw_memory: Harness, size: str) -> None:
    response = await gw_memory.client.get(f"/a2a/acme/tasks?pageSize={size}", headers=gw_memory.auth())
    assert response.status == 400
    assert reason(await response.read()) == (400, "INVALID_PARAMS", "Invalid pageSize")


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/unknown", 404),
        ("GET", "/a2a/acme/unknown", 404),
        ("GET", "/a2a/acme/message:send", 405),
        ("PUT", "/a2a/acme/message:send", 405),
        ("DELETE", "/a2a/acme/message:send", 405),
        ("POST", "/a2a/acme/tasks", 405),
        ("DELETE", "/a2a/acme/tasks/t-1/pushNotificationConfigs", 405),
        ("POST", "/a2a/acme/tasks/t-1/pushNotificationConfigs/c-1", 405),
        ("POST", "/a2a/acme/.well-known/agent-card.json", 405),
        ("GET", "/a2a", 404),
        ("GET", "/a2a/acme", 404),
    ],
)
@pytest.mark.parametrize("authenticated", [False, True], ids=["no-token", "token"])
async def test_s2_2_unmatched_routes_are_bare(
    gw_memory: Harness, method: str, path: str, status: int, authenticated: bool
) -> None:
    headers = gw_memory.auth() if authenticated else {}
    response = await gw_memory.client.request(method, path, headers=headers, data=b"{garbage")
    assert response.status == status
    assert await response.read() == b""
    assert response.headers.get("Content-Type", "") != A2A_JSON


async def test_s2_2_routing_before_authentication_before_brand_before_body(gw_memory: Harness) -> None:
    client = gw_memory.client
    # Unauthenticated with a malformed body: a bare 401, not a body error.
    response = await client.post("/a2a/acme/message:send", data=b"{not json")
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="a2a"'
    assert await response.read() == b""
    # Unknown Brand without a token: authentication first.
    response = await client.post("/a2a/nobody/message:send", data=b"{}")
    assert response.status == 401
    # Unknown Brand with a valid token: a bare 404 even though the body is garbage.
    response = await client.post("/a2a/nobody/message:send", data=b"{not json", headers=gw_memory.auth())
    assert (response.status, await response.read()) == (404, b"")
    response = await client.get("/a2a/nobody/tasks/t-1", headers=gw_memory.auth())
    assert (response.status, await response.read()) == (404, b"")
    # Known Brand, valid token, bad body: now the body is read.
    response = await client.post("/a2a/acme/message:send", data=b"{not json", headers=gw_memory.auth())
    assert reason(await response.read()) == (400, "INVALID_PARAMS", "Invalid JSON request body")


async def test_request_id_is_echoed_or_minted(gw_memory: Harness) -> None:
    response = await gw_memory.client.get(
        "/a2a/acme/tasks", headers={**gw_memory.auth(), "X-Request-Id": "req-12345678"}
    )
    assert response.headers["X-Request-Id"] == "req-12345678"
    response = await gw_memory.client.get(
        "/a2a/acme/tasks", headers={**gw_memory.auth(), "X-Request-Id": "bad id\u00e9"}
    )
    assert len(response.headers["X-Request-Id"]) == 32
