"""The answers protocols: one method per request, named after it, and every
request a plan may ask answered by the runtime family that may be asked it."""

from __future__ import annotations

import inspect
import typing

import pytest

from tickwork.lifecycle import requests
from tickwork.lifecycle.answers import (
    REQUEST_TYPES,
    Answers,
    OwnerLocalAnswers,
    SharedAnswers,
    answer_table,
    method_name,
)
from tickwork.lifecycle.requests import AskLiveness, ClaimOrProbe, Commit, LaneHasPending
from tickwork.runtimes.owner_local import _LocalAnswers
from tickwork.runtimes.shared import _SharedRuntimeAnswers

FAMILIES = (OwnerLocalAnswers, SharedAnswers)


def protocol_methods(protocol: type) -> dict[str, object]:
    return {name: value for klass in protocol.__mro__ if klass not in (object, typing.Generic)
            for name, value in vars(klass).items()
            if inspect.isfunction(value) and not name.startswith("_")}


def test_method_names_follow_the_request_names() -> None:
    assert method_name(ClaimOrProbe) == "claim_or_probe"
    assert method_name(Commit) == "commit"


@pytest.mark.parametrize("family", FAMILIES)
def test_each_protocol_method_takes_the_request_it_is_named_after(family: type) -> None:
    for name, method in protocol_methods(family).items():
        hints = typing.get_type_hints(method, vars(requests))
        kind = hints["request"]
        assert method_name(kind) == name, (name, kind)


def test_every_request_is_answered_by_some_family_and_common_ones_by_both() -> None:
    owner = protocol_methods(OwnerLocalAnswers).keys()
    shared = protocol_methods(SharedAnswers).keys()
    common = protocol_methods(Answers).keys()
    names = {method_name(kind) for kind in REQUEST_TYPES}
    assert names == owner | shared
    assert owner & shared == common
    # What only one family is asked, and why (see the protocols' docstrings).
    assert owner - common == {method_name(AskLiveness), method_name(LaneHasPending)}
    assert shared - common == {"commit", "abort"}


@pytest.mark.parametrize(("answers", "family"), [(_LocalAnswers, OwnerLocalAnswers),
                                                 (_SharedRuntimeAnswers, SharedAnswers)])
def test_each_runtime_answers_every_request_of_its_family(answers: type,
                                                          family: type) -> None:
    # mypy proves this where the class is instantiated; this says it at run time too.
    missing = {name for name in protocol_methods(family)
               if getattr(answers, name) is getattr(family, name)}
    assert not missing
    table = answer_table(object.__new__(answers), family)
    assert {method_name(kind) for kind in table} == protocol_methods(family).keys()


def awaited_by_annotation(answers: type) -> set[str]:
    """The answers declared to return an awaitable (the annotation's text)."""
    return {name for name, value in vars(answers).items()
            if inspect.isfunction(value) and not name.startswith("_")
            and str(value.__annotations__.get("return", "")).startswith("Awaitable")}


def test_the_awaited_requests_are_the_answers_that_return_awaitables() -> None:
    from tickwork.runtimes import owner_local, shared

    assert {method_name(kind) for kind in shared._AWAITED} == awaited_by_annotation(
        _SharedRuntimeAnswers)
    # Owner-local: the execution, the liveness probe and the wake (awaited
    # only when the host's wake is async: the runtime drops it otherwise).
    assert {method_name(kind) for kind in owner_local._AWAITED} == awaited_by_annotation(
        _LocalAnswers) == {"execute", "ask_liveness", "wake"}
