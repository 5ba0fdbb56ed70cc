"""§2.2 ``GET tasks``: ``pageSize`` is parsed without trusting its length (review row 10).

Python's ``int()`` refuses strings of more than 4,300 digits with a ``ValueError``; a
``pageSize`` of 5,000 digits used to escape as a ``500`` with a traceback instead of the §6
``INVALID_PARAMS`` every other bad ``pageSize`` gets.
"""

from __future__ import annotations

import orjson
import pytest

from gateway.protocol.errors import A2AError, Reason
from gateway.protocol.tasks import parse_page_size
from tests.support.gateway import Harness

HUGE = "9" * 5000
"""Past Python's 4,300-digit limit for converting a string to an integer."""


@pytest.mark.parametrize("raw", [HUGE, "1" + "0" * 4400, "0" * 4999 + "101"])
def test_s6_a_page_size_too_long_for_int_is_invalid_params(raw: str) -> None:
    with pytest.raises(A2AError) as refused:
        parse_page_size(raw)
    assert refused.value.reason is Reason.INVALID_PARAMS


@pytest.mark.parametrize(("raw", "size"), [("007", 7), ("0" * 5000 + "50", 50), ("0100", 100)])
def test_s2_2_leading_zeros_do_not_count(raw: str, size: int) -> None:
    assert parse_page_size(raw) == size


@pytest.mark.parametrize("raw", ["0" * 5000, "00", "+5", "5e1", "１０"])
def test_s6_other_digit_strings_stay_invalid(raw: str) -> None:
    with pytest.raises(A2AError):
        parse_page_size(raw)


@pytest.mark.parametrize("size", [HUGE, "-" + HUGE])
async def test_s6_huge_page_size_over_http_is_invalid_params_not_500(gw_memory: Harness, size: str) -> None:
    response = await gw_memory.client.get(f"/a2a/acme/tasks?pageSize={size}", headers=gw_memory.auth())
    body = await response.read()
    assert response.status == 400, body
    assert response.headers["Content-Type"] == "application/a2a+json"
    error = orjson.loads(body)["error"]
    assert (error["message"], error["details"][0]["reason"]) == ("Invalid pageSize", "INVALID_PARAMS")
