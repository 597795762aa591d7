"""Group commit: concurrent ticks share claim and settlement statements.

Every commit costs the server an fsync, and a per-job claim plus a per-job
settlement is two of them. A :class:`Coalescer` turns the requests that
arrive while its previous statement is in flight into one statement for all
of them: ticks never wait for a timer (an idle system flushes at once), and
under load one commit carries many claims or many settlements.

Nothing about fencing changes: a batched claim gives each tick its own
private token and lease, and a batched settlement is fenced per row on that
token and an unexpired lease, so each request learns on its own whether its
row was written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

Request = TypeVar("Request")
Answer = TypeVar("Answer")

Flush = Callable[[list[Request]], Awaitable[list[Answer]]]


class Coalescer(Generic[Request, Answer]):
    """Runs ``flush`` over everything submitted while earlier flushes were in flight.

    At most ``max_in_flight`` flushes run at once (each on its own connection):
    with two, one batch can commit while the next one is being filled and
    sent, so the ticks that are settling and the ticks that are claiming do
    not wait for each other's fsync.
    """

    def __init__(
        self, flush: Flush[Request, Answer], *, max_batch: int = 64, max_in_flight: int = 1
    ) -> None:
        if max_batch < 1 or max_in_flight < 1:
            raise ValueError("max_batch and max_in_flight must be at least 1")
        self._flush = flush
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        self._waiting: list[tuple[Request, asyncio.Future[Answer]]] = []
        # Runner tasks hold themselves here; `_active` counts the ones still
        # looping, updated in the same synchronous step in which a runner sees
        # nothing left to do, so a request can never land after the last
        # runner's final look and be left waiting.
        self._runners: set[asyncio.Task[None]] = set()
        self._active = 0
        self.flushes = 0
        self.requests = 0

    async def submit(self, request: Request) -> Answer:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answer] = loop.create_future()
        self._waiting.append((request, future))
        if self._active < self._max_in_flight:
            self._active += 1
            runner = loop.create_task(self._run())
            self._runners.add(runner)
            runner.add_done_callback(self._runners.discard)
        return await future

    async def _run(self) -> None:
        try:
            await self._flush_waiting()
        finally:
            self._active -= 1

    async def _flush_waiting(self) -> None:
        # Let every task that is ready to submit in this loop iteration do so
        # before the first flush: ticks released together share one commit.
        await asyncio.sleep(0)
        while self._waiting:
            batch = self._waiting[: self._max_batch]
            del self._waiting[: self._max_batch]
            live = [(request, future) for request, future in batch if not future.cancelled()]
            if not live:
                continue
            self.flushes += 1
            self.requests += len(live)
            try:
                answers = await self._flush([request for request, _ in live])
            except BaseException as error:  # every waiter of this batch gets the error
                for _, future in live:
                    if not future.done():
                        future.set_exception(error)
                if isinstance(error, asyncio.CancelledError):
                    raise
                continue
            for (_, future), answer in zip(live, answers, strict=True):
                if not future.done():
                    future.set_result(answer)
