"""The client's address: the peer's, or what a trusted proxy says (``listen.trusted_proxies``).

A client can write any ``X-Forwarded-For`` or ``Forwarded``; only hops appended by trusted
proxies are believed, read from the right, and nothing is read from an untrusted peer.
"""

from __future__ import annotations

import logging
from ipaddress import ip_network

import pytest
from aiohttp.test_utils import make_mocked_request

from gateway.config import ForwardedHeader, ListenConfig
from gateway.http.client_address import UntrustedForwarding, address_subject, client_address, parse_address

INGRESS = ListenConfig(trusted_proxies=(ip_network("10.0.0.0/8"), ip_network("fd00::/8")))


def address(
    peer: str,
    header: str | None = None,
    *,
    listen: ListenConfig = INGRESS,
    name: ForwardedHeader | None = None,
) -> str:
    chosen = name or listen.forwarded_header
    if name is not None:
        listen = ListenConfig(trusted_proxies=listen.trusted_proxies, forwarded_header=name)
    headers = {} if header is None else {chosen: header}
    request = make_mocked_request("POST", "/", headers=headers).clone(remote=peer)
    return client_address(request, listen)


def test_no_trusted_proxies_the_header_is_never_read() -> None:
    assert address("192.0.2.1", "203.0.113.9", listen=ListenConfig()) == "192.0.2.1"


def test_an_untrusted_peer_is_the_client_whatever_it_writes() -> None:
    assert address("192.0.2.1", "203.0.113.9") == "192.0.2.1"


def test_a_trusted_proxy_names_the_client() -> None:
    assert address("10.0.0.5", "203.0.113.9") == "203.0.113.9"


def test_hops_are_read_from_the_right_skipping_trusted_proxies() -> None:
    # The client forged "198.51.100.1"; the Ingress (10.0.0.7) appended the address it saw.
    assert address("10.0.0.5", "198.51.100.1, 203.0.113.9, 10.0.0.7") == "203.0.113.9"


def test_a_chain_of_trusted_proxies_gives_its_leftmost() -> None:
    assert address("10.0.0.5", "10.0.0.9, 10.0.0.7") == "10.0.0.9"


def test_a_garbled_hop_stops_at_the_proxy_that_passed_it_on() -> None:
    assert address("10.0.0.5", "203.0.113.9, not-an-address, 10.0.0.7") == "10.0.0.7"
    assert address("10.0.0.5", "") == "10.0.0.5"
    assert address("10.0.0.5") == "10.0.0.5"


def test_rfc7239_forwarded_when_chosen() -> None:
    forwarded = 'for=198.51.100.1, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.7'
    assert address("10.0.0.5", forwarded, name="Forwarded") == "2001:db8:cafe::17"
    # X-Forwarded-For is then the client's own word, never read.
    request = make_mocked_request("POST", "/", headers={"X-Forwarded-For": "203.0.113.9"}).clone(
        remote="10.0.0.5"
    )
    forwarded_only = ListenConfig(trusted_proxies=INGRESS.trusted_proxies, forwarded_header="Forwarded")
    assert client_address(request, forwarded_only) == "10.0.0.5"


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("192.0.2.1:4711", "192.0.2.1"),
        ("2001:db8::1", "2001:db8::1"),
        ('"[2001:db8::1]:4711"', "2001:db8::1"),
        ("::ffff:192.0.2.1", "192.0.2.1"),
        ("unknown", None),
        ("_hidden", None),
        ("[2001:db8::1", None),
    ],
)
def test_addresses_as_proxies_write_them(text: str, parsed: str | None) -> None:
    found = parse_address(text)
    assert (None if found is None else str(found)) == parsed


def test_an_ipv4_mapped_peer_is_its_ipv4_address_when_proxies_are_weighed() -> None:
    assert address("::ffff:192.0.2.1") == "192.0.2.1"
    assert address("::ffff:10.0.0.5", "203.0.113.9") == "203.0.113.9"


def test_limits_count_an_ipv6_client_by_its_network_without_a_zone_id() -> None:
    """Issue 28 L2: a host is usually given a whole /64; keyed by its full address (and zone id), one
    client had 2⁶⁴ budgets."""
    assert address_subject("2001:db8:1:2:aaaa::1", 64) == "2001:db8:1:2::/64"
    assert address_subject("2001:db8:1:2:bbbb::9", 64) == "2001:db8:1:2::/64"
    assert address_subject("2001:db8:1:2:aaaa::1", 48) == "2001:db8:1::/48"
    assert address_subject("fe80::1%eth0", 64) == address_subject("fe80::2%eth1", 64) == "fe80::/64"
    assert address_subject("192.0.2.1", 64) == "192.0.2.1"
    assert address_subject("::ffff:192.0.2.1", 64) == "192.0.2.1"  # a dual-stack socket's IPv4 client
    assert address_subject("-", 64) == "-"


def test_only_a_private_peer_forwarding_to_a_gateway_that_trusts_none_is_warned_of(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 28 L3: a public client writing X-Forwarded-For is no misconfiguration; a private peer
    (an Ingress controller, a proxy on the host) doing it, with no proxy trusted, is."""
    forwarded = {"X-Forwarded-For": "203.0.113.9"}
    notice = UntrustedForwarding()
    with caplog.at_level(logging.WARNING, logger="pact_gateway.client_address"):
        notice.check(
            make_mocked_request("GET", "/", headers=forwarded).clone(remote="1.1.1.1"), ListenConfig()
        )
        notice.check(make_mocked_request("GET", "/", headers=forwarded).clone(remote="10.1.2.3"), INGRESS)
        notice.check(make_mocked_request("GET", "/").clone(remote="10.1.2.3"), ListenConfig())
        assert not caplog.records
        assert not notice.warned
        for peer in ("10.1.2.3", "fd00::5"):
            notice.check(
                make_mocked_request("GET", "/", headers=forwarded).clone(remote=peer), ListenConfig()
            )
    assert [record.getMessage().split(" is ignored")[0] for record in caplog.records] == [
        "X-Forwarded-For sent by the private peer 10.1.2.3"
    ]
