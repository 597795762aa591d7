"""Validation helpers in tickwork.model.jobs: canonical JSON, job validation, cargo comparison."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import unchecked_job
from tickwork import InvalidArgument, InvalidJob, Job, Recovery
from tickwork.model.jobs import (
    MAX_ID_LENGTH,
    MAX_LANE_LENGTH,
    MAX_REASON_LENGTH,
    MAX_SAFE_INTEGER,
    ValidJob,
    canonical_json,
    cargo_differences,
    check_reason,
    check_safe_int,
    check_text,
    validate_job,
)

# ------------------------------------------------------------ canonical_json


def test_keys_are_sorted_and_there_are_no_spaces() -> None:
    assert canonical_json({"b": 1, "a": [1, 2], "c": {"z": None, "y": True}}) == (
        '{"a":[1,2],"b":1,"c":{"y":true,"z":null}}'
    )


def test_key_order_does_not_matter() -> None:
    first = {"a": 1, "b": {"x": 1, "y": 2}}
    second = {"b": {"y": 2, "x": 1}, "a": 1}
    assert canonical_json(first) == canonical_json(second)


def test_non_ascii_text_is_kept_verbatim() -> None:
    assert canonical_json({"name": "Zoë ☃"}) == '{"name":"Zoë ☃"}'


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "null"), (True, "true"), (False, "false"), (0, "0"), (-7, "-7"), ("s", '"s"'),
     (1.5, "1.5"), ([], "[]"), ({}, "{}"), (MAX_SAFE_INTEGER, str(MAX_SAFE_INTEGER))],
)
def test_scalars_and_empty_containers(value: Any, text: str) -> None:
    assert canonical_json(value) == text


def test_tuples_serialise_as_arrays() -> None:
    assert canonical_json((1, "a", (None,))) == '[1,"a",[null]]'
    assert canonical_json({"t": (1, 2)}) == canonical_json({"t": [1, 2]})


def test_a_non_string_key_at_the_top_is_refused() -> None:
    with pytest.raises(InvalidJob) as caught:
        canonical_json({1: "x"})
    assert caught.value.field == "payload"
    assert "payload has a non-string key 1" in str(caught.value)


def test_a_nested_non_string_key_is_refused_with_its_path() -> None:
    with pytest.raises(InvalidJob) as caught:
        canonical_json({"outer": [{"fine": 1}, {"inner": {2: "x"}}]})
    assert caught.value.field == "payload"
    assert "payload['outer'][1]['inner'] has a non-string key 2" in str(caught.value)


@pytest.mark.parametrize("key", [None, True, 1.5, ("a",)])
def test_other_non_string_keys_are_refused(key: Any) -> None:
    with pytest.raises(InvalidJob, match="non-string key"):
        canonical_json({"a": {key: 1}})


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_with_their_path(bad: float) -> None:
    with pytest.raises(InvalidJob) as caught:
        canonical_json({"a": [0, bad]})
    assert caught.value.field == "payload"
    assert f"payload['a'][1] is {bad!r}" in str(caught.value)
    assert "JSON cannot represent" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "kind"),
    [(b"bytes", "bytes"), ({1, 2}, "set"), (object(), "object"), (1j, "complex")],
)
def test_non_json_values_are_refused_with_path_and_type(value: Any, kind: str) -> None:
    with pytest.raises(InvalidJob) as caught:
        canonical_json({"k": [value]})
    assert f"payload['k'][0] is a {kind}, which is not JSON" in str(caught.value)


def nested_lists(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_nesting_up_to_the_limit_is_accepted() -> None:
    # 201 nested lists: the innermost sits at depth 200.
    text = canonical_json(nested_lists(201))
    assert text == "[" * 201 + "]" * 201


def test_nesting_beyond_the_limit_is_refused() -> None:
    with pytest.raises(InvalidJob) as caught:
        canonical_json(nested_lists(202))
    assert caught.value.field == "payload"
    assert "nested too deeply" in str(caught.value)


def test_very_deep_nesting_is_refused_without_a_recursion_error() -> None:
    deep: dict[str, Any] = {}
    for _ in range(50_000):
        deep = {"d": deep}
    with pytest.raises(InvalidJob, match="nested too deeply"):
        canonical_json(deep)


# -------------------------------------------------------- check_* helpers


def test_check_text_bounds_and_type() -> None:
    assert check_text("f", "x", 3, InvalidArgument) == "x"
    assert check_text("f", "xyz", 3, InvalidArgument) == "xyz"
    with pytest.raises(InvalidArgument, match="must be 1 to 3 characters, got 0"):
        check_text("f", "", 3, InvalidArgument)
    with pytest.raises(InvalidArgument, match="must be 1 to 3 characters, got 4"):
        check_text("f", "wxyz", 3, InvalidArgument)
    with pytest.raises(InvalidJob, match="must be a string, got int") as caught:
        check_text("f", 3, 3, InvalidJob)
    assert caught.value.field == "f"


def test_check_safe_int_bounds_and_type() -> None:
    assert check_safe_int("n", MAX_SAFE_INTEGER, InvalidArgument, 0) == MAX_SAFE_INTEGER
    assert check_safe_int("n", 0, InvalidArgument, 0) == 0
    with pytest.raises(InvalidArgument, match="must be within 0 and"):
        check_safe_int("n", -1, InvalidArgument, 0)
    with pytest.raises(InvalidArgument, match="must be within"):
        check_safe_int("n", MAX_SAFE_INTEGER + 1, InvalidArgument, 0)
    with pytest.raises(InvalidArgument, match="must be an integer, got bool"):
        check_safe_int("n", True, InvalidArgument, 0)
    with pytest.raises(InvalidArgument, match="must be an integer, got float"):
        check_safe_int("n", 1.0, InvalidArgument, 0)


def test_check_reason() -> None:
    assert check_reason("reason", "r" * MAX_REASON_LENGTH) == "r" * MAX_REASON_LENGTH
    with pytest.raises(InvalidArgument) as caught:
        check_reason("reason", "r" * (MAX_REASON_LENGTH + 1))
    assert caught.value.field == "reason"
    with pytest.raises(InvalidArgument):
        check_reason("reason", "")


# ------------------------------------------------------------- validate_job


def good(**changes: Any) -> Job:
    fields: dict[str, Any] = {
        "job_id": "job", "queue": "q", "lane": "lane", "priority": 0,
        "payload": {"b": 1, "a": 2}, "recovery": None,
    }
    fields.update(changes)
    return Job(**fields)


def bad(**changes: Any) -> Job:
    """``good(**changes)`` made around the constructor's checks."""
    fields: dict[str, Any] = {
        "queue": "q", "lane": "lane", "priority": 0, "payload": {"b": 1, "a": 2},
        "recovery": None,
    }
    fields.update(changes)
    return unchecked_job(fields.pop("job_id", "job"), **fields)


def test_a_valid_job_is_canonicalised() -> None:
    valid = validate_job(good(priority=-3, recovery=Recovery(2)))
    assert valid == ValidJob("job", "q", "lane", -3, '{"a":2,"b":1}', 2)
    assert validate_job(good()).max_recoveries is None


def test_boundaries_are_accepted() -> None:
    valid = validate_job(good(
        job_id="j" * MAX_ID_LENGTH, queue="q" * MAX_ID_LENGTH, lane="l" * MAX_LANE_LENGTH,
        priority=-MAX_SAFE_INTEGER, recovery=Recovery(MAX_SAFE_INTEGER), payload=None,
    ))
    assert len(valid.job_id) == MAX_ID_LENGTH and len(valid.lane) == MAX_LANE_LENGTH
    assert valid.priority == -MAX_SAFE_INTEGER
    assert valid.max_recoveries == MAX_SAFE_INTEGER
    assert valid.payload_json == "null"
    assert validate_job(good(priority=MAX_SAFE_INTEGER)).priority == MAX_SAFE_INTEGER
    assert validate_job(good(recovery=Recovery(0))).max_recoveries == 0


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"job_id": ""}, "job_id"),
        ({"job_id": "j" * (MAX_ID_LENGTH + 1)}, "job_id"),
        ({"job_id": 5}, "job_id"),
        ({"queue": ""}, "queue"),
        ({"queue": "q" * (MAX_ID_LENGTH + 1)}, "queue"),
        ({"queue": None}, "queue"),
        ({"lane": ""}, "lane"),
        ({"lane": "l" * (MAX_LANE_LENGTH + 1)}, "lane"),
        ({"lane": b"lane"}, "lane"),
        ({"priority": MAX_SAFE_INTEGER + 1}, "priority"),
        ({"priority": -MAX_SAFE_INTEGER - 1}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": 1.0}, "priority"),
        ({"priority": "1"}, "priority"),
        ({"recovery": 3}, "recovery"),
        ({"recovery": {"max_recoveries": 1}}, "recovery"),
        ({"recovery": Recovery(-1)}, "recovery.max_recoveries"),
        ({"recovery": Recovery(MAX_SAFE_INTEGER + 1)}, "recovery.max_recoveries"),
        ({"recovery": Recovery(True)}, "recovery.max_recoveries"),
        ({"payload": {"x": math.nan}}, "payload"),
        ({"payload": {1: "x"}}, "payload"),
        ({"payload": object()}, "payload"),
    ],
)
def test_each_bad_field_is_named(changes: dict[str, Any], field: str) -> None:
    # Refused where the job is built, and by validate_job (ingest) when a
    # job got past the constructor: the same error, word for word.
    with pytest.raises(InvalidJob) as built:
        good(**changes)
    with pytest.raises(InvalidJob) as caught:
        validate_job(bad(**changes))
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert isinstance(caught.value, ValueError)
    assert (built.value.field, str(built.value)) == (field, str(caught.value))


def test_the_first_bad_field_is_reported() -> None:
    for make in (good, bad):
        with pytest.raises(InvalidJob) as caught:
            validate_job(make(job_id="", queue="", priority=True, payload={1: 1}))
        assert caught.value.field == "job_id"
        with pytest.raises(InvalidJob) as caught:
            validate_job(make(lane="", priority=True))
        assert caught.value.field == "lane"


@pytest.mark.parametrize("not_a_job", [None, {"job_id": "x"}, ("x", "q", "l", 0, {}, None)])
def test_only_jobs_validate(not_a_job: Any) -> None:
    with pytest.raises(InvalidJob) as caught:
        validate_job(not_a_job)
    assert caught.value.field == "job"
    assert "must be a tickwork.Job" in str(caught.value)


# -------------------------------------------------------- cargo_differences


def test_identical_cargo_has_no_differences() -> None:
    new = validate_job(good(payload={"a": 1, "b": 2}))
    stored = validate_job(good(payload={"b": 2, "a": 1}))
    assert cargo_differences(new, stored) == ()


def test_the_job_id_is_not_cargo() -> None:
    assert cargo_differences(validate_job(good(job_id="x")), validate_job(good(job_id="y"))) == ()


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"queue": "other"}, ("queue",)),
        ({"lane": "other"}, ("lane",)),
        ({"priority": 1}, ("priority",)),
        ({"payload": {"a": 3}}, ("payload",)),
        ({"recovery": Recovery(0)}, ("recovery",)),
        ({"queue": "o", "lane": "o", "priority": 9, "payload": [], "recovery": Recovery(1)},
         ("queue", "lane", "priority", "payload", "recovery")),
        ({"payload": [], "queue": "o"}, ("queue", "payload")),
    ],
)
def test_each_differing_field_is_named_in_order(
    changes: dict[str, Any], expected: tuple[str, ...]
) -> None:
    stored = validate_job(good())
    assert cargo_differences(validate_job(good(**changes)), stored) == expected
    assert cargo_differences(stored, validate_job(good(**changes))) == expected


def test_recovery_budgets_differ() -> None:
    one = validate_job(good(recovery=Recovery(1)))
    two = validate_job(good(recovery=Recovery(2)))
    assert cargo_differences(one, two) == ("recovery",)


# ----------------------------------------------------------------- property

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


def reordered(value: Any, rng: random.Random) -> Any:
    """The same value with every dict's key order shuffled."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: reordered(item, rng) for key, item in items}
    if isinstance(value, list):
        return [reordered(item, rng) for item in value]
    return value


@settings(max_examples=300, deadline=None)
@given(json_values, st.randoms(use_true_random=False))
def test_canonical_json_round_trips_and_ignores_key_order(
    value: Any, rng: random.Random
) -> None:
    text = canonical_json(value)
    assert json.loads(text) == value
    assert canonical_json(reordered(value, rng)) == text
    # Canonical text is a fixed point, and has no insignificant whitespace.
    assert canonical_json(json.loads(text)) == text
    assert text == json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
