"""The client against real hosts: ``tickwork serve`` over loopback HTTP (owner
and PostgreSQL shared scopes, async and sync clients) and the Worker's
``Default.fetch`` (JobOwner over RPC and D1, both SDK shapes).

One scenario (``tests/support/client_scenario.py``) runs everywhere.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio

from tests.support.client_scenario import names, scenario
from tests.support.serve import TOKEN as SERVE_TOKEN
from tests.support.serve import Serve
from tests.support.worker import BASE_URL as WORKER_URL
from tests.support.worker import TOKEN as WORKER_TOKEN
from tickwork import Job
from tickwork.client import ApiError, AsyncClient, Client, FetchTransport, RetryPolicy
from tickwork.model.errors import InvalidArgument


class SyncJobsInThreads:
    """The sync client's Jobs, awaited (each call in a thread), for the scenario."""

    def __init__(self, jobs: Any) -> None:
        self._jobs = jobs

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._jobs, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(method, *args, **kwargs)
        return call


# ------------------------------------------------------------- tickwork serve


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    server = Serve(tmp_path_factory.mktemp("client") / "data").start()
    try:
        yield server
    finally:
        server.stop()




async def test_async_client_against_serve_owner(serve: Serve) -> None:
    client = AsyncClient(serve.url, token=SERVE_TOKEN)
    assert await client.health()
    await scenario(client.owner(f"client-owner-{next(names)}"), runs_beside=False)


async def test_sync_client_against_serve_owner(serve: Serve) -> None:
    client = Client(serve.url, token=SERVE_TOKEN)
    assert client.health()
    await scenario(SyncJobsInThreads(client.owner(f"sync-owner-{next(names)}")),  # type: ignore[arg-type]
                   runs_beside=False)


async def test_async_client_against_serve_shared_postgres(shared_serve: Serve) -> None:
    await scenario(AsyncClient(shared_serve.url, token=SERVE_TOKEN).shared(), runs_beside=True)


async def test_refusals_from_serve_keep_status_code_and_field(serve: Serve) -> None:
    wrong = AsyncClient(serve.url, token="wrong", retry=RetryPolicy(attempts=1))
    with pytest.raises(ApiError) as raised:
        await wrong.owner("x").status()
    assert (raised.value.status, raised.value.code) == (401, "unauthorized")
    no_shared = AsyncClient(serve.url, token=SERVE_TOKEN)
    with pytest.raises(ApiError) as raised:
        await no_shared.shared().status()
    assert (raised.value.status, raised.value.code) == (404, "scope_not_configured")


def test_an_unreachable_host_is_a_transport_error_saying_nothing_was_sent() -> None:
    from tickwork.client import TransportError

    client = Client("http://127.0.0.1:9", token="t", retry=RetryPolicy(attempts=2, base_s=0))
    with pytest.raises(TransportError) as raised:
        client.owner("o").purge("q")
    assert raised.value.maybe_sent is False


# ----------------------------------------------------------------- the Worker


@pytest_asyncio.fixture
async def worker_client(worker: Any, js_module: types.ModuleType) -> AsyncIterator[AsyncClient]:
    """The client inside a Worker (``FetchTransport``, the Workers ``fetch``),
    calling a Worker whose ``Default.fetch`` answers: one Worker enqueueing
    into another's tickwork."""
    import workers  # the stand-in module, installed by the fixture

    from tests.support.fakes.workers_module import use_fetch

    async def other_worker(resource: str, **options: Any) -> Any:
        assert options.pop("redirect") == "manual"
        body = options.pop("body", None)
        incoming = workers.Request(resource, method=options.pop("method"),
                                   headers=options.pop("headers"),
                                   body=b"" if body is None else body.encode())
        assert options == {}
        return await worker.fetch(incoming)

    use_fetch(other_worker)
    try:
        yield AsyncClient(WORKER_URL, token=WORKER_TOKEN, transport=FetchTransport())
    finally:
        use_fetch(None)


@pytest.mark.parametrize("scope", ["owner", "shared"])
async def test_async_client_against_the_worker(worker_client: AsyncClient, scope: str) -> None:
    jobs = (worker_client.owner(f"worker-owner-{next(names)}") if scope == "owner"
            else worker_client.shared())
    await scenario(jobs, runs_beside=False)
    assert await worker_client.health()


@pytest.mark.parametrize(("failure", "maybe_sent", "sends"), [
    ("TypeError: Fetch API cannot load: http://nowhere.invalid/", False, 2),
    ("Network connection lost.", True, 1),
])
async def test_a_failed_fetch_is_never_sent_only_when_its_message_proves_it(
        workers_module: types.ModuleType, failure: str, maybe_sent: bool, sends: int) -> None:
    from tests.support.fakes.workers_module import use_fetch
    from tickwork.client import TransportError

    calls: list[str] = []

    async def failing(resource: str, **options: Any) -> Any:
        calls.append(resource)
        raise OSError(failure)

    use_fetch(failing)
    try:
        client = AsyncClient(WORKER_URL, token=WORKER_TOKEN, transport=FetchTransport(),
                             retry=RetryPolicy(attempts=2, base_s=0))
        with pytest.raises(TransportError) as raised:
            await client.owner("o").purge("q")  # not idempotent: again only if never sent
    finally:
        use_fetch(None)
    assert raised.value.maybe_sent is maybe_sent
    assert len(calls) == sends


# ------------------------------------------------------ the directory of owners


async def test_the_directory_of_owners_through_both_clients_against_serve(
        serve: Serve) -> None:
    prefix = f"directory-{next(names)}-"
    client = AsyncClient(serve.url, token=SERVE_TOKEN)
    for suffix, waiting in (("a", 1), ("b", 3), ("c", 2)):
        jobs = client.owner(prefix + suffix)
        await jobs.pause("q")  # the jobs stay queued: the summary counts them
        await jobs.ingest_many([Job(f"j{index}", "q") for index in range(waiting)])
    first = await client.list_owners(prefix=prefix, sort="queued", limit=2)
    assert [(owner.key, owner.queued, owner.overdue) for owner in first.owners] == [
        (prefix + "b", 3, 3), (prefix + "c", 2, 2)]
    rest = await client.list_owners(prefix=prefix, sort="queued", limit=2, cursor=first.cursor)
    assert ([owner.key for owner in rest.owners], rest.cursor) == ([prefix + "a"], None)
    sync = Client(serve.url, token=SERVE_TOKEN)
    by_key = await asyncio.to_thread(sync.list_owners, prefix=prefix)
    assert [owner.key for owner in by_key.owners] == [prefix + "a", prefix + "b", prefix + "c"]
    # Refused before anything is sent, as the host would refuse it.
    with pytest.raises(InvalidArgument, match="sort"):
        await client.list_owners(sort="size")
    with pytest.raises(InvalidArgument, match="cursor"):
        sync.list_owners(sort="running", cursor=first.cursor)


async def test_the_directory_of_owners_through_the_worker(worker_client: AsyncClient,
                                                          db: Any) -> None:
    from tickwork.directory import OwnerSummary
    from tickwork.stores.d1.owner_directory import D1OwnerDirectory

    directory = D1OwnerDirectory(db)
    await directory.publish(OwnerSummary("acme", 1, 0, 0, 4, 1_000, 2_000))
    await directory.publish(OwnerSummary("zeta", 0, 1, 0, 9, 1_500, 2_000))
    page = await worker_client.list_owners(sort="dead_letters", limit=1)
    assert page.owners == [OwnerSummary("zeta", 0, 1, 0, 9, 1_500, 2_000)]
    rest = await worker_client.list_owners(sort="dead_letters", cursor=page.cursor)
    assert ([owner.key for owner in rest.owners], rest.cursor) == (["acme"], None)
