"""A store under contract test, with the plain SQL the tests read its rows with."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tickwork.ports.shared_store import SharedStore
from tickwork.stores.owner_local import OwnerLocalStore
from tickwork.stores.owner_schema import ensure_schema


class LocalStoreUnderTest:
    """An ``OwnerLocalStore`` over a fresh database of one owner-local kind.

    ``harness``: a ``tests.support.Harness`` (or the Pyodide tier's, over the
    JavaScript ctx.storage); ``rows`` is the host's own read, beside the store.
    """

    def __init__(self, harness: Any) -> None:
        self.harness = harness
        self.kind: str = harness.kind
        database = harness.database()
        ensure_schema(database)
        self.store = OwnerLocalStore(database)

    def rows(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self.harness.host_query(statement, params)]


class SharedStoreUnderTest:
    """A shared store (``D1Store``, ``PostgresStore``) over a fresh database
    with the package's schema; ``rows`` runs plain SQL on the same database."""

    def __init__(self, kind: str, store: SharedStore,
                 query: Callable[[str], Awaitable[list[tuple[Any, ...]]]]) -> None:
        self.kind = kind
        self.store = store
        self._query = query

    async def rows(self, statement: str) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in await self._query(statement)]
