"""The group-commit coalescer (tickwork.stores.postgres.batching), without a database."""

from __future__ import annotations

import asyncio

import pytest

from tickwork.stores.postgres.batching import Coalescer


class Recorder:
    def __init__(self, delay: float = 0.0, fail_on: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.delay = delay
        self.fail_on = fail_on

    async def __call__(self, requests: list[int]) -> list[int]:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self.batches.append(list(requests))
            await asyncio.sleep(self.delay)
            if self.fail_on is not None and self.fail_on in requests:
                raise RuntimeError(f"statement failed on {self.fail_on}")
            return [request * 10 for request in requests]
        finally:
            self.in_flight -= 1


async def test_one_task_submitting_again_right_after_its_answer_is_never_stranded() -> None:
    # The answer wakes the submitter before the runner task has finished; a
    # second submit in that window must still be flushed.
    flush = Recorder()
    coalescer = Coalescer(flush)
    for number in range(200):
        async with asyncio.timeout(1):  # no extra task: the submitter itself awaits
            assert await coalescer.submit(number) == number * 10
    assert coalescer.requests == 200


async def test_requests_that_arrive_together_share_one_flush() -> None:
    flush = Recorder(delay=0.01)
    coalescer = Coalescer(flush)
    answers = await asyncio.gather(*(coalescer.submit(n) for n in range(10)))
    assert answers == [n * 10 for n in range(10)]
    assert flush.batches == [list(range(10))]


async def test_requests_arriving_during_a_flush_go_into_the_next_one() -> None:
    flush = Recorder(delay=0.02)
    coalescer = Coalescer(flush)
    first = asyncio.create_task(coalescer.submit(0))
    await asyncio.sleep(0.005)  # the first flush is in flight
    later = [asyncio.create_task(coalescer.submit(n)) for n in range(1, 6)]
    await asyncio.gather(first, *later)
    assert flush.batches == [[0], [1, 2, 3, 4, 5]]


async def test_batches_and_flights_are_bounded() -> None:
    flush = Recorder(delay=0.005)
    coalescer = Coalescer(flush, max_batch=4, max_in_flight=2)
    await asyncio.gather(*(coalescer.submit(n) for n in range(30)))
    assert max(len(batch) for batch in flush.batches) <= 4
    assert sorted(n for batch in flush.batches for n in batch) == list(range(30))
    assert flush.max_in_flight == 2


async def test_a_failed_flush_fails_every_request_of_its_batch_only() -> None:
    flush = Recorder(delay=0.01, fail_on=3)
    coalescer = Coalescer(flush, max_batch=5)
    results = await asyncio.gather(*(coalescer.submit(n) for n in range(10)),
                                   return_exceptions=True)
    failed = [n for n, result in enumerate(results) if isinstance(result, RuntimeError)]
    assert failed == [0, 1, 2, 3, 4]
    assert results[5:] == [50, 60, 70, 80, 90]


async def test_a_cancelled_waiter_is_left_out_of_later_flushes() -> None:
    flush = Recorder(delay=0.02)
    coalescer = Coalescer(flush)
    first = asyncio.create_task(coalescer.submit(0))
    await asyncio.sleep(0.005)
    doomed = asyncio.create_task(coalescer.submit(1))
    kept = asyncio.create_task(coalescer.submit(2))
    await asyncio.sleep(0)
    doomed.cancel()
    assert await kept == 20 and await first == 0
    assert flush.batches == [[0], [2]]


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Coalescer(Recorder(), max_batch=0)
    with pytest.raises(ValueError, match="at least 1"):
        Coalescer(Recorder(), max_in_flight=0)
