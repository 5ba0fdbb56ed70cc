"""§5.1 the Provider's signing keys: PEM or JWK, kid by RFC 7638, algorithm fixed by the key, rotation."""

from __future__ import annotations

import asyncio
import json

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from gateway.pa_keys import generate_private_jwk
from gateway.provider_keys import ProviderKeys, parse_signing_key
from tests.support.delegation import new_provider_key_pem


def _pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def test_s5_1_pem_key_gets_its_thumbprint_as_kid_every_time() -> None:
    pem = new_provider_key_pem()
    first, second = parse_signing_key(pem), parse_signing_key(pem)
    assert first.alg == "ES256"
    assert first.kid == second.kid
    # RFC 7638 §3.1 computed independently by PyJWT's own JWK support.
    public = {k: v for k, v in first.public_jwk.items() if k in {"crv", "kty", "x", "y"}}
    assert jwt.PyJWK.from_dict(public).key is not None
    assert "d" not in first.public_jwk
    assert first.public_jwk["use"] == "sig"


def test_s5_1_rsa_key_signs_rs256_and_weak_rsa_is_refused() -> None:
    strong = parse_signing_key(_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    assert strong.alg == "RS256"
    with pytest.raises(ValueError, match="at least 2048 bits"):
        parse_signing_key(_pem(rsa.generate_private_key(public_exponent=65537, key_size=1024)))  # noqa: S505 - the weak key under test


def test_s5_1_other_curves_and_public_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="P-256"):
        parse_signing_key(_pem(ec.generate_private_key(ec.SECP384R1())))
    private = generate_private_jwk("ES256")
    public_only = {k: v for k, v in private.items() if k != "d"}
    with pytest.raises(ValueError, match="private member"):
        parse_signing_key(json.dumps(public_only))
    with pytest.raises(ValueError, match="PEM private key"):
        parse_signing_key("not a key")


def test_s5_1_jwk_as_keys_generate_prints_it_keeps_its_kid() -> None:
    private = generate_private_jwk("ES256")
    printed = json.dumps({"private_jwk": private, "jwks": {"keys": []}})
    key = parse_signing_key(printed)
    assert key.kid == private["kid"]
    with pytest.raises(ValueError, match="says alg RS256"):
        parse_signing_key(json.dumps({**private, "alg": "RS256"}))


def test_s5_1_first_key_signs_and_all_are_published() -> None:
    old, new = parse_signing_key(new_provider_key_pem()), parse_signing_key(new_provider_key_pem())
    keys = ProviderKeys([new, old])
    token = keys.sign(b'{"a":1}', "pact-receipt+jws")
    header = jwt.get_unverified_header(token)
    assert header == {"alg": "ES256", "kid": new.kid, "typ": "pact-receipt+jws"}
    published = json.loads(keys.jwks_bytes())["keys"]
    assert [entry["kid"] for entry in published] == [new.kid, old.kid]
    verifier = jwt.PyJWK.from_dict(published[0]).key
    assert jwt.api_jws.decode(token, verifier, algorithms=["ES256"]) == b'{"a":1}'
    assert keys.find(old.kid) is old
    assert keys.find("nope") is None


def test_s5_6_rs256_signatures_verify_with_a_standard_jose_library() -> None:
    key = parse_signing_key(_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    keys = ProviderKeys([key])
    token = keys.sign(b'{"claims":true}', "pact-receipt+jws")
    assert jwt.get_unverified_header(token) == {"alg": "RS256", "kid": key.kid, "typ": "pact-receipt+jws"}
    public = jwt.PyJWK.from_dict(json.loads(keys.jwks_bytes())["keys"][0]).key
    assert jwt.api_jws.decode(token, public, algorithms=["RS256"]) == b'{"claims":true}'


@pytest.mark.parametrize("kind", ["ES256", "RS256"])
def test_s5_6_hand_built_jws_verifies_with_pyjwt_and_the_published_jwks_for_every_padding(kind: str) -> None:
    """RFC 7515 by hand: base64url without padding for every payload length mod 3, R || S for ES256."""
    private = (
        ec.generate_private_key(ec.SECP256R1())
        if kind == "ES256"
        else rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    keys = ProviderKeys([parse_signing_key(_pem(private))])
    public = jwt.PyJWK.from_dict(json.loads(keys.jwks_bytes())["keys"][0]).key
    for length in range(40):
        payload = json.dumps({"claims": "x" * length}).encode()
        token = keys.sign(payload, "pact-receipt+jws")
        assert not set(token) & set("=+/")
        assert jwt.api_jws.decode(token, public, algorithms=[kind]) == payload
        # The same bytes PyJWT itself would produce for the header and payload (signatures are randomized).
        expected = jwt.api_jws.encode(
            payload, private, algorithm=kind, headers={"kid": keys.current.kid, "typ": "pact-receipt+jws"}
        )
        assert jwt.get_unverified_header(token) == jwt.get_unverified_header(expected)
        assert token.split(".")[1] == expected.split(".")[1]


async def test_s5_6_signatures_asked_in_one_loop_pass_are_made_together_after_it() -> None:
    keys = ProviderKeys([parse_signing_key(new_provider_key_pem())])
    public = jwt.PyJWK.from_dict(json.loads(keys.jwks_bytes())["keys"][0]).key
    payloads = [f'{{"n":{n}}}'.encode() for n in range(5)]
    futures = [keys.batch.sign(payload, "pact-receipt+jws") for payload in payloads]
    futures[2].cancel()  # its turn was cancelled meanwhile: skipped, the others still signed
    assert len(keys.batch) == 5
    assert not any(future.done() and not future.cancelled() for future in futures)
    await asyncio.sleep(0)  # the next pass of the loop signs the whole batch in one callback
    assert len(keys.batch) == 0
    for n, (payload, future) in enumerate(zip(payloads, futures, strict=True)):
        if n == 2:
            assert future.cancelled()
            continue
        assert jwt.api_jws.decode(future.result(), public, algorithms=["ES256"]) == payload
