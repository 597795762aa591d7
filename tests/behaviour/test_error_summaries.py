"""Error summaries, on every store.

When an executor raises, the job's record keeps what it raised, as
``JobRecord.error``: the exception's type, message and traceback, each
capped (``MAX_ERROR_TYPE``, ``MAX_ERROR_MESSAGE``, ``MAX_ERROR_TRACEBACK``
characters); an attempt that ends otherwise keeps none. A retried or
redriven job keeps the ended attempt's error, and its history entry the
short ``"Type: message"``. The raise is logged once, naming the job.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support import job
from tests.support.engine import Engine
from tickwork import (
    MAX_ERROR_MESSAGE,
    MAX_ERROR_TRACEBACK,
    ErrorSummary,
    JobRecord,
    Retry,
)


class PaymentDeclined(Exception):
    """An executor's own exception: its summary names it with its module."""


def raised(error: BaseException) -> BaseException:
    """``error`` after a real raise, so it carries a traceback."""
    try:
        raise error
    except BaseException as caught:
        return caught


async def run_raising(engine: Engine, job_id: str, error: BaseException,
                      **extra: object) -> JobRecord:
    """Ingest a blocking job, let its executor raise ``error``, and read it back."""
    jobs = engine.runtime()
    await jobs.ingest(job(job_id, queue=f"queue-{job_id}", payload={"do": "block"},
                          **extra))  # type: ignore[arg-type]
    task = await engine.start(jobs, job_id)
    engine.executor.release(job_id, error)
    await task
    record = await jobs.read(job_id)
    assert record is not None
    return record


async def test_a_raise_settles_failed_with_its_type_message_and_traceback(
        engine: Engine) -> None:
    record = await run_raising(engine, "pay", raised(PaymentDeclined("card 4242 declined")))
    assert (record.state, record.outcome, record.failure_reason) == (
        "settled", "failed", "execution_failed")
    assert record.error is not None
    assert record.error.type == f"{__name__}.PaymentDeclined"
    assert record.error.message == "card 4242 declined"
    traceback = record.error.traceback
    assert traceback.startswith("Traceback (most recent call last):\n")
    # The innermost frame is the executor's, and the exception comes last.
    assert "in __call__" in traceback
    assert traceback.endswith(f"{__name__}.PaymentDeclined: card 4242 declined\n")
    assert record.history == ()


async def test_a_long_message_and_a_huge_traceback_are_cut_at_their_caps(
        engine: Engine) -> None:
    message = "start " + "é" * 10_000 + " end"
    record = await run_raising(engine, "long", raised(ValueError(message)))
    assert record.error is not None
    assert len(record.error.message) == MAX_ERROR_MESSAGE
    assert record.error.message == message[:MAX_ERROR_MESSAGE - 1] + "\u2026"
    traceback = record.error.traceback
    assert len(traceback) == MAX_ERROR_TRACEBACK
    marker, _, tail = traceback.partition("\n")
    # The end is kept (the exception line, with the message's end), after a
    # line saying how much was cut: at least what the message's line adds
    # beyond the part kept.
    assert tail.endswith("é" * 10 + " end\n")
    assert marker.startswith("[tickwork: ") and marker.endswith(" characters of traceback cut]")
    cut = int(marker.split()[1])
    assert cut >= len(f"ValueError: {message}\n") - len(tail)


async def test_a_chained_exception_keeps_the_whole_chain(engine: Engine) -> None:
    def charge() -> None:
        try:
            {}["card"]
        except KeyError as missing:
            raise RuntimeError("charge failed") from missing

    try:
        charge()
    except RuntimeError as error:
        chained = error
    record = await run_raising(engine, "chained", chained)
    assert record.error is not None
    assert (record.error.type, record.error.message) == ("RuntimeError", "charge failed")
    traceback = record.error.traceback
    assert "KeyError: 'card'" in traceback
    assert "The above exception was the direct cause of the following exception" in traceback
    assert traceback.index("KeyError") < traceback.index("RuntimeError: charge failed")
    assert traceback.endswith("RuntimeError: charge failed\n")


async def test_any_unicode_round_trips_and_a_lone_surrogate_is_replaced(
        engine: Engine) -> None:
    text = "naïve ☃ 😀 \u200b 日本語 \"quoted\" \\ back\nnew line\ttab"
    record = await run_raising(engine, "unicode", raised(ValueError(text)))
    assert record.error is not None and record.error.message == text
    assert record.error.traceback.endswith(f"ValueError: {text}\n")
    # A lone surrogate (and a NUL) is a valid str no UTF-8 store can keep:
    # each becomes U+FFFD, on every store alike.
    record = await run_raising(engine, "surrogate", raised(ValueError("bad \ud800 and \x00!")))
    assert record.error is not None
    assert record.error.message == "bad \ufffd and \ufffd!"
    assert record.error.traceback.endswith("ValueError: bad \ufffd and \ufffd!\n")


async def test_a_retried_job_keeps_the_error_and_its_history_the_short_line(
        engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("flaky", payload={"do": "fail_until", "succeed_on": 3, "raise": True},
                          retry=Retry(attempts=3, base_delay_ms=1_000)))
    result = await jobs.tick()
    assert (result.status, result.failure_reason) == ("retried", "execution_failed")
    record = await jobs.read("flaky")
    assert record is not None and (record.state, record.attempt) == ("queued", 2)
    # Queued for its next attempt, it shows why the last one ended.
    assert record.error is not None
    assert (record.error.type, record.error.message) == ("RuntimeError", "attempt 1 exploded")
    assert record.error.traceback.endswith("RuntimeError: attempt 1 exploded\n")
    assert [entry.error for entry in record.history] == ["RuntimeError: attempt 1 exploded"]
    now.advance(1_000)
    assert (await jobs.tick()).status == "retried"
    now.advance(2_000)
    result = await jobs.tick()
    assert (result.status, result.outcome) == ("settled", "completed")
    record = await jobs.read("flaky")
    assert record is not None
    # The attempt that completed raised nothing: the record keeps no error,
    # and the history still says what the earlier ones raised.
    assert record.error is None
    assert [(entry.attempt, entry.failure_reason, entry.error) for entry in record.history] == [
        (1, "execution_failed", "RuntimeError: attempt 1 exploded"),
        (2, "execution_failed", "RuntimeError: attempt 2 exploded")]


async def test_an_attempt_that_fails_without_raising_clears_the_error(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("mixed", payload={"do": "fail_until", "raise_before": 2},
                          retry=Retry(2, base_delay_ms=1_000)))
    assert (await jobs.tick()).status == "retried"
    now.advance(1_000)
    result = await jobs.tick()
    assert (result.status, result.failure_reason) == ("settled", "attempt-2")
    record = await jobs.read("mixed")
    assert record is not None
    assert (record.outcome, record.failure_reason, record.error) == ("failed", "attempt-2", None)
    assert [entry.error for entry in record.history] == ["RuntimeError: attempt 1 exploded"]


async def test_a_long_short_line_is_cut_at_300_characters_in_history(engine: Engine) -> None:
    message = "😀" * 400
    record = await run_raising(engine, "emoji", raised(ValueError(message)))
    assert record.error is not None and record.error.message == message
    # A redrive keeps the dead letter's error until the next attempt ends,
    # and its history entry the short line, cut to 300 characters.
    jobs = engine.runtime()
    assert (await jobs.redrive("emoji", "r-1")).status == "redriven"
    redriven = await jobs.read("emoji")
    assert redriven is not None and redriven.state == "queued"
    assert redriven.error == record.error
    (entry,) = redriven.history
    assert entry.redrive_id == "r-1"
    assert entry.error == ("ValueError: " + message)[:300]
    assert entry.error is not None and len(entry.error) == 300
    assert entry.error == record.error.line


async def test_an_invalid_result_keeps_a_type_error_naming_what_was_returned(
        engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("bad", payload={"do": "invalid"}))
    await jobs.tick()
    record = await jobs.read("bad")
    assert record is not None and record.failure_reason == "invalid_outcome"
    assert record.error == ErrorSummary(
        "TypeError", "the executor returned str, not an outcome (Completed, Failed, "
        "Cancelled, OutcomeUnknown or RateLimited)", "")


async def test_outcomes_that_are_not_raises_keep_no_error(engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest_many([job("done", queue="a", payload={"do": "complete"}),
                            job("failed", queue="b", payload={"do": "fail", "reason": "x"}),
                            job("unknown", queue="c", payload={"do": "unknown"})])
    await jobs.drain()
    for job_id in ("done", "failed", "unknown"):
        record = await jobs.read(job_id)
        assert record is not None and record.state == "settled" and record.error is None


async def test_a_failed_lane_writes_no_error_over_an_earlier_attempts(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("waiting", lane="doomed",
                          payload={"do": "fail_until", "raise": True},
                          retry=Retry(3, base_delay_ms=60_000)))
    assert (await jobs.tick()).status == "retried"
    record = await jobs.read("waiting")
    assert record is not None and record.error is not None
    result = await jobs.fail_lane("doomed", "lane_gone")
    assert result.settled == 1
    record = await jobs.read("waiting")
    assert record is not None
    assert (record.outcome, record.failure_reason, record.error) == ("failed", "lane_gone", None)


async def test_a_recovered_crash_settles_interrupted_with_no_error(engine: Engine) -> None:
    dying = engine.runtime()
    await dying.ingest(job("lost", payload={"do": "block"}))
    await engine.lose(dying, await engine.start(dying, "lost"))
    engine.make_recoverable()
    survivor = engine.runtime()
    assert (await survivor.tick()).outcome == "interrupted"
    record = await survivor.read("lost")
    assert record is not None and record.error is None


async def test_a_raise_after_a_cancellation_settles_cancelled_and_keeps_the_error(
        engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("doomed", payload={"do": "block"}))
    task = await engine.start(jobs, "doomed")
    assert (await jobs.cancel("doomed", "c-1")).status == "recorded"
    # The executor ignores its signal and raises: the careful settlement
    # writes cancelled, with what it raised.
    engine.executor.release("doomed", raised(ValueError("too late")))
    result = await task
    assert result.outcome == "cancelled"
    record = await jobs.read("doomed")
    assert record is not None and record.outcome == "cancelled"
    assert record.error is not None and record.error.message == "too late"


@contextmanager
def execution_log() -> Iterator[list[logging.LogRecord]]:
    """The records the tickwork.execution logger emits meanwhile."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("tickwork.execution")
    handler = Keep(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


async def test_a_raise_is_logged_once_with_the_job_id(engine: Engine) -> None:
    with execution_log() as records:
        await run_raising(engine, "logged", raised(PaymentDeclined("card declined")))
        jobs = engine.runtime()
        await jobs.ingest(job("fine", payload={"do": "complete"}))
        await jobs.drain()
    assert [(record.levelno, record.getMessage()) for record in records] == [
        (logging.ERROR, f"job logged (queue queue-logged) attempt 1 raised "
                        f"{__name__}.PaymentDeclined: card declined")]
    assert records[0].exc_info is not None
    assert isinstance(records[0].exc_info[1], PaymentDeclined)


async def test_a_dead_letter_listing_carries_the_error(engine: Engine) -> None:
    record = await run_raising(engine, "dead", raised(ValueError("gone")))
    (letter,) = (await engine.runtime().dead_letters("queue-dead")).jobs
    assert record.error is not None
    assert letter.error == record.error
