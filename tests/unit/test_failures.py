"""summarize_exception: what a job's record keeps of a raise, and its caps."""

from __future__ import annotations

import traceback

import pytest

from tickwork import (
    MAX_ERROR_MESSAGE,
    MAX_ERROR_TRACEBACK,
    MAX_ERROR_TYPE,
    ErrorSummary,
    summarize_exception,
)
from tickwork.model.failures import (
    MAX_ERROR_LINE,
    TRUNCATED_MARK,
    clean_text,
    summary_from_json,
    summary_to_json,
)


class Outer:
    class Inner(Exception):
        pass


def raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


def test_the_type_is_the_qualified_class_name() -> None:
    assert summarize_exception(ValueError("x")).type == "ValueError"
    assert summarize_exception(Outer.Inner()).type == f"{__name__}.Outer.Inner"
    long = type("L" * 300, (Exception,), {})
    name = summarize_exception(long()).type
    assert len(name) == MAX_ERROR_TYPE and name == f"{__name__}.{'L' * 300}"[:MAX_ERROR_TYPE]


def test_an_exception_never_raised_has_only_its_own_line() -> None:
    assert summarize_exception(ValueError()) == ErrorSummary("ValueError", "", "ValueError\n")
    assert summarize_exception(KeyError("k")) == ErrorSummary(
        "KeyError", "'k'", "KeyError: 'k'\n")


@pytest.mark.parametrize("length", [0, 1, MAX_ERROR_MESSAGE - 1, MAX_ERROR_MESSAGE])
def test_a_message_up_to_the_cap_is_kept_whole(length: int) -> None:
    assert summarize_exception(ValueError("m" * length)).message == "m" * length


@pytest.mark.parametrize("length", [MAX_ERROR_MESSAGE + 1, 10 * MAX_ERROR_MESSAGE])
def test_a_longer_message_is_cut_to_the_cap_and_marked(length: int) -> None:
    message = summarize_exception(ValueError("m" * length)).message
    assert len(message) == MAX_ERROR_MESSAGE
    assert message == "m" * (MAX_ERROR_MESSAGE - 1) + TRUNCATED_MARK


def test_a_traceback_up_to_the_cap_is_kept_whole() -> None:
    error = raised(ValueError("short"))
    full = "".join(traceback.format_exception(error))
    assert len(full) < MAX_ERROR_TRACEBACK
    assert summarize_exception(error).traceback == full
    assert full.startswith("Traceback (most recent call last):\n")


# Lengths around the cap, and where the count the marker reports gains a
# digit (the marker's own length changes): the result is exactly the cap.
@pytest.mark.parametrize("extra", [1, 2, 50, 9_990, 9_999, 10_000, 10_001, 10_050, 99_999,
                                   100_000, 100_100])
def test_a_longer_traceback_keeps_its_end_after_a_marker_line(extra: int) -> None:
    base = raised(ValueError("t"))
    overhead = len("".join(traceback.format_exception(base))) - 1  # all but the message
    error = raised(ValueError("t" * (MAX_ERROR_TRACEBACK - overhead + extra)))
    full = "".join(traceback.format_exception(error))
    assert len(full) == MAX_ERROR_TRACEBACK + extra
    kept = summarize_exception(error).traceback
    assert len(kept) == MAX_ERROR_TRACEBACK
    marker, _, tail = kept.partition("\n")
    assert full.endswith(tail)
    assert marker == f"[tickwork: {len(full) - len(tail)} characters of traceback cut]"


def test_a_chain_is_in_the_traceback() -> None:
    try:
        try:
            raise KeyError("inner")
        except KeyError:
            raise RuntimeError("outer")  # noqa: B904 - the implicit chain is the point
    except RuntimeError as error:
        text = summarize_exception(error).traceback
    assert "KeyError: 'inner'" in text
    assert "During handling of the above exception, another exception occurred" in text
    assert text.endswith("RuntimeError: outer\n")


def test_a_broken_str_does_not_break_the_summary() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    summary = summarize_exception(raised(Unprintable()))
    assert summary.type == f"{__name__}.test_a_broken_str_does_not_break_the_summary.<locals>" \
                           ".Unprintable"
    assert summary.message == "<str() of the exception raised RuntimeError>"
    assert summary.traceback  # format_exception copes with it on its own terms


def test_lone_surrogates_and_nul_become_replacement_characters_one_for_one() -> None:
    assert clean_text("a\ud800b\udfffc\x00") == "a\ufffdb\ufffdc\ufffd"
    assert clean_text("😀 日本") == "😀 日本"
    summary = summarize_exception(raised(ValueError("x\udc80y")))
    assert summary.message == "x\ufffdy"
    summary.traceback.encode("utf-8")  # every field is valid UTF-8
    assert summary.traceback.endswith("ValueError: x\ufffdy\n")


def test_the_short_line_is_type_and_message_cut_to_300() -> None:
    assert ErrorSummary("ValueError", "bad", "").line == "ValueError: bad"
    line = ErrorSummary("ValueError", "m" * 1000, "").line
    assert len(line) == MAX_ERROR_LINE == 300 and line == ("ValueError: " + "m" * 1000)[:300]


def test_the_stored_json_round_trips() -> None:
    summary = summarize_exception(raised(ValueError('quote " and \\ and ☃\n')))
    text = summary_to_json(summary)
    assert text is not None and summary_from_json(text) == summary
    assert summary_to_json(None) is None and summary_from_json(None) is None
