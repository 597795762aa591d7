"""Borrowing a connection from the caller's psycopg 3 pool."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any


@contextlib.asynccontextmanager
async def autocommit_connection(pool: Any) -> AsyncIterator[Any]:
    """A pooled connection in autocommit mode, restored when it goes back.

    Each single statement is then its own transaction, with no BEGIN/COMMIT
    round trips; multi-statement transactions are opened explicitly. The
    pool's own setting is put back, so the caller's other users of the pool
    see the connection as they configured it.
    """
    async with pool.connection() as conn:
        restore = not conn.autocommit
        if restore:
            await conn.set_autocommit(True)
        try:
            yield conn
        finally:
            if restore and not conn.closed:
                await conn.set_autocommit(False)
