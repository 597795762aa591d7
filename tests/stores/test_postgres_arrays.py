"""Array literals (tickwork.stores.postgres.arrays) read back, on a real server,
as exactly the list they were built from."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwork.stores.postgres.arrays import bigint_array, text_array

# PostgreSQL text cannot hold NUL; everything else may appear in a payload,
# a queue name or an error's JSON.
# Text PostgreSQL can hold: no NUL, no lone surrogate (neither encodes to UTF-8 text).
TEXTS = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                max_size=40)
HOSTILE = ["", "NULL", "null", " ", " padded ", "a,b", "{}", "{1,2}", '"', '\\', '\\"',
           'say "hi"', "tab\there", "line\nbreak", "é ü ✓ 漢字", '{"k": "v\\n"}']
BIGINTS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FIXTURE_REUSE = settings(max_examples=150, deadline=None,
                         suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def conn(postgres_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        yield connection


def read_back(conn: psycopg.Connection[Any], literal: str, cast: str) -> list[Any]:
    row = conn.execute(f"SELECT %s::{cast}", (literal,)).fetchone()
    assert row is not None
    return list(row[0])


def test_hostile_texts_and_nulls_read_back_unchanged(conn: psycopg.Connection[Any]) -> None:
    values: list[str | None] = [*HOSTILE, None, *HOSTILE[::-1], None]
    assert read_back(conn, text_array(values), "text[]") == values


def test_empty_arrays(conn: psycopg.Connection[Any]) -> None:
    assert read_back(conn, text_array([]), "text[]") == []
    assert read_back(conn, bigint_array([]), "bigint[]") == []


@FIXTURE_REUSE
@given(st.lists(st.one_of(st.none(), TEXTS, st.sampled_from(HOSTILE)), max_size=12))
def test_any_text_list_reads_back_unchanged(conn: psycopg.Connection[Any],
                                            values: list[str | None]) -> None:
    assert read_back(conn, text_array(values), "text[]") == values


@FIXTURE_REUSE
@given(st.lists(st.one_of(st.none(), BIGINTS), max_size=12))
def test_any_bigint_list_reads_back_unchanged(conn: psycopg.Connection[Any],
                                              values: list[int | None]) -> None:
    assert read_back(conn, bigint_array(values), "bigint[]") == values


@pytest.mark.parametrize("wrong", [1.5, True, "7", b"7"])
def test_a_bigint_element_that_is_not_an_int_is_refused_by_name(wrong: Any) -> None:
    with pytest.raises(TypeError, match=f"bigint\\[\\] element must be int or None, not"
                                        f" {type(wrong).__name__}"):
        bigint_array([1, wrong])


@pytest.mark.parametrize("wrong", [7, b"x", 1.5])
def test_a_text_element_that_is_not_a_str_is_refused_by_name(wrong: Any) -> None:
    with pytest.raises(TypeError, match=f"text\\[\\] element must be str or None, not"
                                        f" {type(wrong).__name__}"):
        text_array(["ok", wrong])
