"""The guarded clients over real connections on 127.0.0.1: every form of an internal
address is refused before a connection is made, a name is checked each time it is
connected to (DNS rebinding), a redirect's next hop is checked too, and ``check_url``
(registration) resolves without connecting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from egress import EgressPolicy, EgressRefused, check_url, httpx2_client, httpx_client
from egress_testing import PUBLIC_IP, FakeDns, listener

SHUT, DEV = EgressPolicy(), EgressPolicy(allow_loopback=True)
CLIENTS: dict[str, Callable[..., Any]] = {"httpx": httpx_client, "httpx2": httpx2_client}
LOOPBACK_FORMS = [
    "127.0.0.1", "0x7f000001", "2130706433", "017700000001", "127.1", "[::ffff:127.0.0.1]",
    "localhost",
]  # fmt: skip


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("host", LOOPBACK_FORMS)
async def test_every_loopback_form_is_refused_unless_dev_opens_it(client: str, host: str) -> None:
    make = CLIENTS[client]
    with listener() as rx:
        url = f"http://{host}:{rx.port}/hook"
        async with make(SHUT, timeout=5) as http:
            with pytest.raises(EgressRefused, match="resolves to a loopback address"):
                await http.post(url, content=b"{}")
        assert rx.got == []  # refused before connecting
        async with make(DEV, timeout=5) as http:
            answered = await http.post(url, content=b"{}")
    assert answered.status_code == 200 and rx.got == ["POST /hook"]


@pytest.mark.parametrize("client", CLIENTS)
async def test_ipv6_loopback_is_refused(client: str) -> None:
    async with CLIENTS[client](SHUT, timeout=5) as http:
        with pytest.raises(EgressRefused, match="loopback"):
            await http.get("http://[::1]:9/")


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("169.254.169.254", "a link-local address"),
        ("10.0.0.1", "a private address"),
        ("192.168.0.1", "a private address"),
        ("100.64.0.1", "a shared (carrier-grade NAT) address"),
        ("0.0.0.0", "an unspecified address (0.0.0.0 or ::)"),  # noqa: S104 (the address under test)
        ("[fd00::1]", "a private address"),
        ("[fe80::1]", "a link-local address"),
    ],
)
async def test_internal_addresses_are_refused_without_a_connection(
    client: str, host: str, kind: str
) -> None:
    # The suite's network guard fails the test if anything connects to these.
    async with CLIENTS[client](DEV, timeout=5) as http:
        with pytest.raises(EgressRefused) as refused:
            await http.get(f"http://{host}/latest/meta-data/")
    assert str(refused.value) == f"egress_refused: the URL resolves to {kind}"


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_name_is_checked_at_every_connection(
    client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dns = FakeDns(monkeypatch)
    dns.answers["rebind.test"] = [PUBLIC_IP, "127.0.0.1"]  # public once, then loopback
    with listener() as rx:
        url = f"http://rebind.test:{rx.port}/hook"
        await check_url(url, SHUT)  # registration: public, accepted
        async with CLIENTS[client](SHUT, timeout=5) as http:
            with pytest.raises(EgressRefused, match="loopback"):
                await http.post(url, content=b"{}")
    assert rx.got == [] and dns.asked == ["rebind.test", "rebind.test"]


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_name_with_one_internal_address_among_public_ones_is_refused(
    client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dns = FakeDns(monkeypatch)
    dns.answers["split.test"] = [f"{PUBLIC_IP},10.9.8.7"]
    with pytest.raises(EgressRefused, match="private"):
        await check_url("https://split.test/hook", SHUT)
    async with CLIENTS[client](SHUT, timeout=5) as http:
        with pytest.raises(EgressRefused, match="private"):
            await http.get("https://split.test/hook")


@pytest.mark.parametrize("client", CLIENTS)
async def test_the_next_checked_address_is_tried_when_one_does_not_answer(
    client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dns = FakeDns(monkeypatch)
    dns.answers["twice.test"] = ["127.0.0.2,127.0.0.1"]  # nothing listens on 127.0.0.2
    with listener() as rx:
        async with CLIENTS[client](DEV, timeout=5) as http:
            answered = await http.get(f"http://twice.test:{rx.port}/hook")
    assert answered.status_code == 200 and rx.got == ["GET /hook"]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("target", ["http://169.254.169.254/latest/", "http://10.0.0.1:8080/"])
async def test_a_redirect_to_an_internal_address_is_not_followed(client: str, target: str) -> None:
    # The first hop is allowed (loopback, as under --dev); the redirect's is refused.
    with listener(redirect=target) as rx:
        async with CLIENTS[client](DEV, timeout=5, follow_redirects=True) as http:
            with pytest.raises(EgressRefused):
                await http.get(f"http://127.0.0.1:{rx.port}/start")
        async with CLIENTS[client](DEV, timeout=5) as http:  # the default: not followed
            answered = await http.get(f"http://127.0.0.1:{rx.port}/start")
    assert answered.status_code == 302 and rx.got == ["GET /start", "GET /start"]


async def test_check_url_refuses_literals_and_names_and_never_connects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dns = FakeDns(monkeypatch)
    dns.answers |= {"public.test": [PUBLIC_IP], "metadata.test": ["169.254.169.254"]}
    dns.answers["unresolvable.test"] = []
    await check_url("https://public.test/hook", SHUT)
    await check_url("https://unresolvable.test/hook", SHUT)  # connect time decides
    await check_url("http://10.0.0.1/", EgressPolicy(allow_private=True))
    for url in ("https://metadata.test/", "http://0xa9fea9fe/", "http://127.1:8080/"):
        with pytest.raises(EgressRefused):
            await check_url(url, SHUT)
    with pytest.raises(ValueError, match="not an http"):
        await check_url("ftp://public.test/", SHUT)
