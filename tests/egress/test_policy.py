"""The classifier and the policy: every internal address class is named, the IPv4 inside
an IPv6 address decides for it, numbers are read as the system resolver reads them."""

from __future__ import annotations

import ipaddress
from typing import get_args

import pytest

from egress import AddressKind, EgressPolicy, EgressRefused, classify, literal_address

REFUSED = {
    "127.0.0.1": "loopback",
    "127.255.0.9": "loopback",
    "::1": "loopback",
    "::ffff:127.0.0.1": "loopback",  # IPv4-mapped: the IPv4 address decides
    "2002:7f00:1::": "loopback",  # 6to4 of 127.0.0.1
    "64:ff9b::7f00:1": "loopback",  # NAT64 of 127.0.0.1
    "0.0.0.0": "unspecified",  # noqa: S104 (the address under test)
    "::": "unspecified",
    "169.254.169.254": "link_local",  # the cloud metadata service
    "fe80::1": "link_local",
    "::ffff:169.254.169.254": "link_local",
    "10.1.2.3": "private",
    "172.16.0.1": "private",
    "192.168.1.1": "private",
    "fc00::1": "private",
    "fd12:3456::1": "private",
    "64:ff9b::a00:1": "private",  # NAT64 of 10.0.0.1
    "100.64.0.1": "shared",  # carrier-grade NAT
    "100.127.255.254": "shared",
    "224.0.0.1": "multicast",
    "ff02::1": "multicast",
    "240.0.0.1": "reserved",
    "::7f00:1": "reserved",  # the deprecated IPv4-compatible form
    "0.0.0.10": "private",  # "this network"
    "198.18.0.1": "private",  # benchmarking
}
PUBLIC = ["8.8.8.8", "93.184.215.14", "2606:4700::1111", "64:ff9b::808:808", "2002:808:808::"]


@pytest.mark.parametrize(("address", "kind"), REFUSED.items())
def test_internal_addresses_are_named_by_class(address: str, kind: str) -> None:
    assert classify(ipaddress.ip_address(address)) == kind


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert classify(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    "host", ["0x7f000001", "2130706433", "017700000001", "127.1", "0177.0.0.1", "127.0.0.1"]
)
def test_the_legacy_ipv4_forms_read_as_the_resolver_reads_them(host: str) -> None:
    assert literal_address(host) == ipaddress.IPv4Address("127.0.0.1")


def test_other_hosts_are_names_or_ipv6() -> None:
    assert literal_address("[::1]") == ipaddress.IPv6Address("::1")
    assert literal_address("0xa9fea9fe") == ipaddress.IPv4Address("169.254.169.254")
    for name in ("example.com", "cafe", "localhost", "1.2.3.4.example", "x-0x7f"):
        assert literal_address(name) is None, name


def test_the_policy_opens_loopback_for_dev_and_everything_for_allow_private() -> None:
    dev, open_ = EgressPolicy(allow_loopback=True), EgressPolicy(allow_private=True)
    shut = EgressPolicy()
    for address in REFUSED:
        ip = ipaddress.ip_address(address)
        assert shut.refusal(ip) == REFUSED[address]
        assert open_.refusal(ip) is None
        assert dev.refusal(ip) == (None if REFUSED[address] == "loopback" else REFUSED[address])
    assert shut.refusal(ipaddress.ip_address("8.8.8.8")) is None


def test_a_refusal_names_the_class_and_fits_the_delivery_log() -> None:
    messages = {kind: str(EgressRefused(kind)) for kind in get_args(AddressKind)}
    assert messages["private"] == "egress_refused: the URL resolves to a private address"
    assert messages["link_local"] == "egress_refused: the URL resolves to a link-local address"
    assert all(len(m) <= 80 for m in messages.values()), messages  # String(80) in the store
    assert EgressRefused("loopback").code == "egress_refused"
