"""§3.2 header and claim rules, tested as pure functions with ``now`` passed in."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.claims import (
    MAX_TOKEN_LENGTH,
    AuthFailure,
    check_claims,
    check_header,
    split_unverified,
    unverified_issuer,
)
from tests.support.pa import OMIT, PAKey

ISS = "https://pa.example.com"
AUD = "pact-gateway.example-provider"
NOW = 1_700_000_000.0


def claims(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"iss": ISS, "sub": "user-1", "aud": AUD, "iat": NOW, "exp": NOW + 120}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not OMIT}


def reason_of(payload: dict[str, Any], now: float = NOW) -> str | None:
    try:
        check_claims(payload, issuer=ISS, audience=AUD, now=now)
    except AuthFailure as failure:
        return failure.reason
    return None


# --- compact form -------------------------------------------------------------------------


def test_s3_2_split_unverified_reads_header_and_payload() -> None:
    token = PAKey.es256(kid="k1").mint(ISS, "user-1", AUD)
    header, payload = split_unverified(token)
    assert header["kid"] == "k1"
    assert header["alg"] == "ES256"
    assert payload["iss"] == ISS
    assert unverified_issuer(payload) == ISS


@pytest.mark.parametrize(
    "token",
    [
        "",
        "abc",
        "a.b",
        "a.b.c.d",
        "!!.e30.sig",
        "e30.!!.sig",
        "bm90IGpzb24.e30.sig",  # header is not JSON
        "W10.e30.sig",  # header is a JSON array
        "e30.W10.sig",  # payload is a JSON array
        "e30.e30x.sig",  # payload length is not valid base64
        "e30." + "A" * MAX_TOKEN_LENGTH + ".sig",
    ],
)
def test_s3_2_malformed_compact_form_rejected(token: str) -> None:
    with pytest.raises(AuthFailure) as failure:
        split_unverified(token)
    assert failure.value.reason == "malformed"


@given(st.text(max_size=200))
def test_s3_2_split_unverified_never_raises_anything_but_malformed(token: str) -> None:
    reasons: list[str] = []
    try:
        split_unverified(token)
    except AuthFailure as failure:
        reasons.append(failure.reason)
    assert set(reasons) <= {"malformed"}


@pytest.mark.parametrize("iss", [None, 42, "", ["https://pa.example.com"]])
def test_s3_1_unverified_issuer_must_be_a_nonempty_string(iss: object) -> None:
    with pytest.raises(AuthFailure) as failure:
        unverified_issuer({"iss": iss})
    assert failure.value.reason == "malformed"


# --- header ---------------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ["ES256", "RS256"])
def test_s3_2_alg_es256_and_rs256_accepted(alg: str) -> None:
    header = check_header({"alg": alg, "kid": "k1", "typ": "JWT"})
    assert (header.alg, header.kid) == (alg, "k1")


@pytest.mark.parametrize(
    "alg", ["none", "None", "HS256", "HS512", "RS512", "ES384", "PS256", "EdDSA", "", None, 1]
)
def test_s3_2_alg_outside_allow_list_rejected(alg: object) -> None:
    with pytest.raises(AuthFailure) as failure:
        check_header({"alg": alg, "kid": "k1"})
    assert failure.value.reason == "bad_alg"


def test_s3_2_alg_missing_rejected() -> None:
    with pytest.raises(AuthFailure) as failure:
        check_header({"kid": "k1"})
    assert failure.value.reason == "bad_alg"


@pytest.mark.parametrize("name", ["jku", "jwk", "x5u", "x5c", "crit"])
def test_s3_2_headers_that_name_keys_or_extensions_rejected(name: str) -> None:
    with pytest.raises(AuthFailure) as failure:
        check_header({"alg": "ES256", "kid": "k1", name: "https://attacker.example/key"})
    assert failure.value.reason == "forbidden_header"


def test_s3_2_kid_absent_is_allowed_but_must_be_a_string() -> None:
    assert check_header({"alg": "ES256"}).kid is None
    with pytest.raises(AuthFailure) as failure:
        check_header({"alg": "ES256", "kid": 7})
    assert failure.value.reason == "malformed"


# --- claims ---------------------------------------------------------------------------------


def test_s3_2_good_claims_accepted() -> None:
    result = check_claims(claims(jti="j1"), issuer=ISS, audience=AUD, now=NOW)
    assert (result.issuer, result.sub, result.issued_at, result.expires_at) == (ISS, "user-1", NOW, NOW + 120)


def test_s3_2_jti_is_optional() -> None:
    assert reason_of(claims()) is None


def test_s3_1_iss_must_match_exactly() -> None:
    assert reason_of(claims(iss=ISS + "/")) == "unknown_issuer"
    assert reason_of(claims(iss=ISS.upper())) == "unknown_issuer"


@pytest.mark.parametrize(
    "aud",
    [
        [AUD],  # one-element list: §3.2 says one string
        [AUD, "other"],
        "https://support.example-provider.com/a2a/acme",  # a card / interface URL
        "",
        OMIT,
        None,
    ],
)
def test_s3_2_aud_must_be_the_one_assigned_string(aud: object) -> None:
    assert reason_of(claims(aud=aud)) == "bad_audience"


@pytest.mark.parametrize("sub", [OMIT, "", None, 42, ["user-1"]])
def test_s3_2_sub_must_be_a_nonempty_string(sub: object) -> None:
    assert reason_of(claims(sub=sub)) == "bad_sub"


@pytest.mark.parametrize("iat", [OMIT, None, "1700000000", True, math.nan, math.inf])
def test_s3_2_iat_must_be_present_as_a_number(iat: object) -> None:
    assert reason_of(claims(iat=iat)) == "iat_missing"


def test_s3_2_iat_31s_ahead_rejected() -> None:
    assert reason_of(claims(iat=NOW + 31, exp=NOW + 140)) == "iat_future"


def test_s3_2_iat_30s_ahead_accepted() -> None:
    assert reason_of(claims(iat=NOW + 30, exp=NOW + 140)) is None


def test_rfc7519_nbf_in_the_future_beyond_skew_rejected() -> None:
    assert reason_of(claims(nbf=NOW + 31)) == "nbf_future"
    assert reason_of(claims(nbf="soon")) == "nbf_future"
    assert reason_of(claims(nbf=NOW + 30)) is None


@pytest.mark.parametrize("exp", [OMIT, None, "1700000120", False, math.nan])
def test_s3_2_exp_must_be_present_as_a_number(exp: object) -> None:
    assert reason_of(claims(exp=exp)) == "exp_missing"


def test_s3_2_expired_beyond_30s_skew_rejected() -> None:
    exp = NOW + 120
    assert reason_of(claims(), now=exp + 29.9) is None
    assert reason_of(claims(), now=exp + 30) == "expired"
    assert reason_of(claims(), now=exp + 3600) == "expired"


def test_s3_2_exp_more_than_300s_after_iat_rejected() -> None:
    assert reason_of(claims(exp=NOW + 301)) == "lifetime_too_long"
    assert reason_of(claims(exp=NOW + 300)) is None


@given(
    iat_offset=st.floats(min_value=-400, max_value=400, allow_nan=False),
    lifetime=st.floats(min_value=-50, max_value=600, allow_nan=False),
)
def test_s3_2_time_rules_hold_for_any_iat_and_lifetime(iat_offset: float, lifetime: float) -> None:
    iat = NOW + iat_offset
    exp = iat + lifetime
    expected: str | None = None
    if iat > NOW + 30:
        expected = "iat_future"
    elif exp + 30 <= NOW:
        expected = "expired"
    elif exp - iat > 300:
        expected = "lifetime_too_long"
    assert reason_of(claims(iat=iat, exp=exp)) == expected
