"""``RuntimeEnv``: an entry class's ``env`` is one SDK wrapper around the
runtime's env, however many times the SDK wrapped it (CPython; the real
SDKs are run in tests/pyodide, suites ``sdk-external`` and ``sdk-builtin``)."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.fakes.workers_module import installed_workers_module


@pytest.fixture
def runtime_env() -> Iterator[types.ModuleType]:
    # tickwork.cloudflare imports the workers module (the stand-in here).
    with installed_workers_module():
        from tickwork.cloudflare import runtime_env

        yield runtime_env


class Wrapper:
    """Not idempotent: wrapping a wrapper wraps again (the built-in SDK's shape)."""

    def __init__(self, env: Any) -> None:
        self._env = env


class Base:
    """An SDK base class that wraps ``env`` in every subclass's ``__init__``."""

    def __init__(self, ctx: Any, env: Any) -> None:
        self.ctx, self.env = ctx, env

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        replaced = cls.__init__

        def __init__(self: Any, ctx: Any, env: Any) -> None:
            replaced(self, ctx, Wrapper(env))

        cls.__init__ = __init__  # type: ignore[method-assign]


def layers(env: Any) -> int:
    count = 0
    while isinstance(env, Wrapper):
        env, count = env._env, count + 1
    return count


class Plain(Base):
    pass


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_one_wrapper_whatever_the_depth_of_subclassing(
    runtime_env: types.ModuleType, depth: int,
) -> None:
    raw = object()
    plain: type = Plain
    mixed: type = type("Mixed", (runtime_env.RuntimeEnv, Base), {})
    for level in range(depth):
        plain = type(f"Plain{level}", (plain,), {})
        mixed = type(f"Mixed{level}", (mixed,), {})
    assert layers(plain(None, raw).env) == depth + 1  # what the SDK alone gives
    instance = mixed(None, raw)
    assert layers(instance.env) == 1 and instance.env._env is raw


def test_an_unwrapped_env_is_kept(runtime_env: types.ModuleType) -> None:
    raw = object()
    assert runtime_env.env_wrapped_once(raw, raw) is raw
    assert runtime_env.env_wrapped_once(None, raw) is raw


def test_a_wrapper_that_cannot_be_rebuilt_is_kept_and_said_once(
    runtime_env: types.ModuleType, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Stubborn:
        def __init__(self, env: Any, extra: Any) -> None:
            self._env = env

    monkeypatch.setattr(runtime_env, "_reported", set())
    raw, wrapped = object(), Stubborn(object(), None)
    assert runtime_env.env_wrapped_once(raw, wrapped) is wrapped
    assert runtime_env.env_wrapped_once(raw, wrapped) is wrapped
    err = capsys.readouterr().err
    assert err.count("cannot rebuild the SDK's env wrapper") == 1, err
    assert "Stubborn" in err
