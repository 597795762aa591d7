"""tickwork serve's webhook transport reaches public destinations only, unless allowed.

Every test listens on loopback only; a refused destination must leave the
listener without a single connection, and be refused before anything is sent
(``Failed("destination_refused")``, not ``unreachable`` or unknown).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.support.serve import Serve, job
from tickwork import AbortSignal, Completed, Failed, JobRecord
from tickwork.executors.webhook import HttpRefused, webhook_executor
from tickwork.hosts.cpython.destinations import DestinationPolicy, is_public
from tickwork.hosts.cpython.examples import example_registry
from tickwork.hosts.cpython.http_client import guarded_http_post


class Listener:
    """A loopback HTTP listener that answers 200 and counts connections."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self, port: int = 0) -> Listener:
        self.server = await asyncio.start_server(self._handle, self.host, port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.requests.append(head)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


@pytest_asyncio.fixture
async def listener() -> AsyncIterator[Listener]:
    server = await Listener().start()
    yield server
    server.close()


def webhook(url: str, **payload: Any) -> JobRecord:
    return JobRecord("hook-1", "webhooks", "webhooks", 0, {"url": url, "body": {}, **payload},
                     None, "running", None, None, 1, 0, 0, 0, None)


LOOPBACK_SPELLINGS = ["127.0.0.1", "127.1", "2130706433", "0x7f000001", "0177.0.0.1",
                      "[::ffff:127.0.0.1]", "[::1]", "localhost", "0.0.0.0", "[::]"]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
async def test_every_spelling_of_loopback_is_refused_before_connecting(
    listener: Listener, host: str,
) -> None:
    deliver = webhook_executor(guarded_http_post(DestinationPolicy()), timeout_s=5.0)
    result = await deliver(webhook(f"http://{host}:{listener.port}/"), AbortSignal())
    assert result == Failed("destination_refused")
    assert listener.connections == 0


@pytest.mark.parametrize("address", [
    "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
    "224.0.0.1", "239.255.255.250", "198.18.0.1", "192.0.2.1", "240.0.0.1",
    "fe80::1", "fc00::1", "ff02::1", "::ffff:10.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::",
    "2001:db8::1",
])
def test_non_public_addresses_are_not_public(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["1.1.1.1", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses_are(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))


async def test_a_name_is_checked_by_what_it_resolves_to_and_connected_there_only(
    listener: Listener,
) -> None:
    answers = {"hooks.example": [["127.0.0.1"]], "mixed.example": [["1.1.1.1", "127.0.0.1"]]}

    async def resolver(host: str, port: int) -> list[str]:
        return answers[host].pop(0)

    policy = DestinationPolicy(resolver=resolver)
    post = guarded_http_post(policy)
    for host in ("hooks.example", "mixed.example"):
        with pytest.raises(HttpRefused, match="not a public address"):
            await post(f"http://{host}:{listener.port}/", b"{}", {}, 5.0, AbortSignal())
    assert listener.connections == 0


async def test_the_connection_goes_to_the_checked_address_even_if_the_name_changes() -> None:
    """DNS rebinding: the name resolves to an allowed address when checked and
    to another one a moment later. The transport resolves once and connects to
    what it checked, so the second answer is never used."""
    allowed = await Listener("127.0.0.2").start()
    other = await Listener("127.0.0.1").start(allowed.port)
    answers = [["127.0.0.2"], ["127.0.0.1"]]
    calls: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return answers.pop(0)

    policy = DestinationPolicy(["127.0.0.2/32"], resolver=rebinding)
    deliver = webhook_executor(guarded_http_post(policy), timeout_s=5.0)
    result = await deliver(webhook(f"http://rebind.example:{allowed.port}/h"), AbortSignal())
    assert result == Completed()
    assert calls == ["rebind.example"]  # resolved once
    assert (allowed.connections, other.connections) == (1, 0)
    assert b"host: rebind.example" in allowed.requests[0].lower()
    allowed.close()
    other.close()


async def test_an_allow_list_opens_internal_targets(listener: Listener) -> None:
    for allow in (["127.0.0.1"], ["127.0.0.0/8"], ["localhost"]):
        post = guarded_http_post(DestinationPolicy(allow))
        host = "localhost" if allow == ["localhost"] else "127.0.0.1"
        result = await webhook_executor(post, timeout_s=5.0)(
            webhook(f"http://{host}:{listener.port}/"), AbortSignal())
        assert result == Completed(), allow
    assert listener.connections == 3
    with pytest.raises(ValueError, match="not an IP address"):
        DestinationPolicy(["not a host!"])


@pytest.mark.parametrize("name", ["Authorization", "cookie", "Proxy-Authorization"])
async def test_credential_headers_are_refused_unless_allowed(listener: Listener,
                                                             name: str) -> None:
    post = guarded_http_post(DestinationPolicy(["127.0.0.1"]))
    job_record = webhook(f"http://127.0.0.1:{listener.port}/", headers={name: "Bearer x"})
    assert await webhook_executor(post)(job_record, AbortSignal()) == Failed(
        "credentials_refused")
    assert listener.connections == 0
    assert await webhook_executor(post, allow_credentials=True)(
        job_record, AbortSignal()) == Completed()
    assert name.lower().encode() in listener.requests[0].lower()


async def test_the_default_registry_refuses_loopback(listener: Listener) -> None:
    registry = example_registry()
    result = await registry(webhook(f"http://127.0.0.1:{listener.port}/", kind="webhook"),
                            AbortSignal())
    assert result == Failed("destination_refused") and listener.connections == 0


def test_serve_refuses_its_own_api_and_takes_an_allow_list(tmp_path: Path) -> None:
    """A token holder cannot make serve POST to its own API (or any loopback
    port) with the token in the payload's headers; --webhook-allow opens a
    target, --webhook-credentials lets credentials through."""
    serve = Serve(tmp_path / "data", executors=None).start()
    try:
        client = serve.client()
        own_api = f"{serve.url}/v1/owners/victim/jobs"
        client.enqueue("o", job("self", "webhook", payload={
            "url": own_api, "body": {"job_id": "x", "queue": "q"},
            "headers": {"x-forwarded": "1"}}))
        assert client.settled("o", "self")["failure_reason"] == "destination_refused"
        client.enqueue("o", job("token", "webhook", queue="q2", payload={
            "url": "https://1.1.1.1/", "body": {},
            "headers": {"authorization": "Bearer host-test-token"}}))
        assert client.settled("o", "token")["failure_reason"] == "credentials_refused"
        assert client.job("victim", "x") is None
    finally:
        assert serve.stop() == 0
    allowed = Serve(tmp_path / "data2", "--webhook-allow", "127.0.0.1", executors=None).start()
    try:
        client = allowed.client()
        client.enqueue("o", job("self", "webhook", payload={
            "url": f"{allowed.url}/v1/health", "body": {}}))
        # Reached (GET-only route: a POST gets 405, a refusal by the receiver).
        assert client.settled("o", "self")["failure_reason"] == "http_405"
    finally:
        assert allowed.stop() == 0
