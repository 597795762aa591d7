"""A CPython stand-in for the parts of ``pyodide.ffi`` the Durable Object glue meets.

Python Workers run on Pyodide, where every value crossing between Python and
JavaScript is converted by fixed rules. The DO storage stand-in
(``tests.support.fakes.do_storage``) models the JavaScript side with the classes here
and applies the same conversions, so code under test sees what it would see
in a Worker.

JavaScript-side values are represented as follows (internal to the fakes):

=================  ===========================================
JavaScript         Representation here
=================  ===========================================
``undefined``      ``None``
``null``           :data:`jsnull`
boolean            ``bool``
number             ``float`` (always: JS has only doubles)
bigint             :class:`JsBigInt`
string             ``str``
a Python object    :class:`PyProxy` (what JS holds for a proxied Python object)
any object         a :class:`JsProxy` subclass instance
=================  ===========================================

Sources for the conversion rules (checked with the search tool):

* Python -> JS, implicit: ``None`` -> ``undefined``, ``bool``/``float``/``str``
  as themselves, ``int`` -> a Number only when ``-(2**53 - 1) < x < 2**53 - 1``
  (strict: MEASURED in workerd with Pyodide 0.28.2, and in npm ``pyodide@0.28.2``
  under Node), a BigInt otherwise -- so ``+-(2**53 - 1)`` themselves are
  BigInts; everything else (including ``bytes`` and ``tuple``) -> a PyProxy.
  [pyodide docs/usage/type-conversions.md; src/core/python2js.c]
* JS -> Python, implicit: a number becomes ``int`` when
  ``Number.isSafeInteger(x)``, else ``float``; a bigint becomes ``int``;
  ``undefined`` -> ``None``; ``null`` -> ``jsnull`` (Pyodide >= 0.28, PR
  pyodide#5719; 0.28.2 is what ``python_workers_20250116`` runs); a PyProxy
  is unwrapped to the original object.  [pyodide src/core/js2python.js
  ``js2python_convertImmutableInner``; js2python.c ``_js2python_null``]
* ``JsProxy.to_py()`` converts Array -> list, plain Object -> dict (only if the
  constructor is ``Object``), ArrayBuffer/TypedArray -> memoryview, and keeps
  ``jsnull`` (pyodide#5849); anything else is passed to ``default_converter``
  or left as a JsProxy.  [js2python.js ``js2python_convertOther``]
* A plain-object JsProxy is not subscriptable (``TypeError: ... is not
  subscriptable``); ``as_object_map()`` gives mapping access.
  [pyodide src/py/_pyodide/_core_docs.py]
* ``jsnull``: in Pyodide 0.28.x it is a truthy singleton that is not None (as
  the project's facts file says; pyodide#6001 "Should JsNull be none-ish after
  all?"). NOTE: later Pyodide (the current ``_core_docs.py``) gives
  ``JsNull.__bool__`` -> False, so code must test ``is jsnull``, never truthiness.

Assumption (not confirmed): a Python exception raised in a Python callback
called from JS comes back out of the JS call as the original exception object.
"""

from __future__ import annotations

import contextlib
import math
import sys
import types
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any

import pytest

#: ``Number.MAX_SAFE_INTEGER``.
MAX_SAFE_INTEGER = 2**53 - 1

#: Version reported by the fake ``pyodide`` module (the one Workers use with
#: ``python_workers_20250116``).
FAKE_PYODIDE_VERSION = "0.28.2"


# ---------------------------------------------------------------------------
# null, errors
# ---------------------------------------------------------------------------
class JsNull:
    """Python view of JavaScript ``null`` (``pyodide.ffi.jsnull``).

    A singleton, not ``None``, and truthy as in Pyodide 0.28.x (see module
    docstring). It is not a JsProxy subclass (as in Pyodide's own definition).
    """

    _instance: JsNull | None = None

    def __new__(cls) -> JsNull:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "jsnull"

    typeof = "object"


#: The singleton standing for JavaScript ``null``.
jsnull = JsNull()


class JsException(Exception):
    """A JavaScript error surfacing in Python (``pyodide.ffi.JsException``).

    ``name`` is the JS error class (``"Error"``, ``"TypeError"``, ...),
    ``message`` its message; ``str()`` reads like JS ``String(error)``.
    """

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


class ConversionError(Exception):
    """``pyodide.ffi.ConversionError``."""


class JsBigInt:
    """A JavaScript bigint (JS-side representation only)."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"{self.value}n"


class PyProxy:
    """What JavaScript holds for a Python object it received (JS-side only)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __repr__(self) -> str:
        return f"PyProxy({self.obj!r})"


# ---------------------------------------------------------------------------
# JsProxy family
# ---------------------------------------------------------------------------
class _JsConstructor:
    """Enough of a JS constructor for ``proxy.constructor.name`` checks."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"function {self.name}() {{ [native code] }}"


class JsProxy:
    """Base class of every fake JavaScript object seen from Python.

    Equality is identity, like ``===`` between two JsProxies.
    """

    _js_class = "Object"

    @property
    def constructor(self) -> _JsConstructor:
        return _JsConstructor(self._js_class)

    @property
    def typeof(self) -> str:
        return "object"

    @property
    def js_id(self) -> int:
        return id(self)

    def to_py(
        self,
        *,
        depth: int = -1,
        default_converter: Callable[[Any, Callable[[Any], Any], Callable[[Any, Any], None]], Any]
        | None = None,
    ) -> Any:
        return _to_py(self, depth, default_converter, {})

    def _to_py_shallow(self, convert: Callable[[Any], Any]) -> Any:
        """Return the converted container, or NotImplemented if not convertible."""
        return NotImplemented

    def __repr__(self) -> str:
        return "[object Object]"


class JsObject(JsProxy):
    """A plain JavaScript object (``{...}``), e.g. one SQL result row.

    Properties read as attributes (``row.col``) with implicit conversion.
    Not subscriptable, not iterable, no ``len`` -- as in Pyodide.
    """

    def __init__(self, props: Iterable[tuple[str, Any]] = ()) -> None:
        store: dict[str, Any] = {}
        for key, value in props:
            store[key] = value  # a later duplicate key overwrites, as in JS
        object.__setattr__(self, "_props", _js_key_order(store))

    def __getattr__(self, name: str) -> Any:
        props: dict[str, Any] = object.__getattribute__(self, "_props")
        if name in props:
            return js_to_py(props[name])
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._props[name] = py_to_js(value)
        object.__setattr__(self, "_props", _js_key_order(self._props))

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *self._props]

    def object_keys(self) -> JsArray:
        return JsArray(list(self._props))

    def object_values(self) -> JsArray:
        return JsArray(list(self._props.values()))

    def object_entries(self) -> JsArray:
        return JsArray([JsArray([key, value]) for key, value in self._props.items()])

    def as_object_map(self, *, hereditary: bool = False) -> JsObjectMap:
        return JsObjectMap(self, hereditary=hereditary)

    def _to_py_shallow(self, convert: Callable[[Any], Any]) -> Any:
        return {key: convert(value) for key, value in self._props.items()}


class JsObjectMap(JsProxy, Mapping[str, Any]):
    """``JsProxy.as_object_map()``: a plain object viewed as a mapping."""

    def __init__(self, target: JsObject, *, hereditary: bool) -> None:
        self._target = target
        self._hereditary = hereditary

    def __getitem__(self, key: str) -> Any:
        props: dict[str, Any] = self._target._props
        if key not in props:
            raise KeyError(key)
        value = js_to_py(props[key])
        if self._hereditary and isinstance(value, JsObject):
            return value.as_object_map(hereditary=True)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._target._props))

    def __len__(self) -> int:
        return len(self._target._props)


class JsArray(JsProxy):
    """A JavaScript Array: ``length``, ``len()``, indexing, iteration, ``to_py()``."""

    _js_class = "Array"

    def __init__(self, items: Iterable[Any] = ()) -> None:
        self._items = list(items)

    @property
    def length(self) -> int:
        return len(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: int) -> Any:
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError("JsArray indices must be integers")
        return js_to_py(self._items[index])

    def __iter__(self) -> Iterator[Any]:
        return (js_to_py(item) for item in list(self._items))

    def __repr__(self) -> str:
        return ",".join(_js_to_string(item) for item in self._items)

    def _to_py_shallow(self, convert: Callable[[Any], Any]) -> Any:
        return [convert(item) for item in self._items]


class JsBuffer(JsProxy):
    """An ArrayBuffer (what SQL BLOBs come back as) or a Uint8Array (from ``to_js``).

    ``to_bytes()`` copies the data out; ``to_py()`` gives a memoryview, as in
    Pyodide. An ArrayBuffer has no ``length``, so ``len()`` fails on it.
    """

    def __init__(self, data: bytes, *, kind: str = "ArrayBuffer") -> None:
        if kind not in ("ArrayBuffer", "Uint8Array"):
            raise ValueError(kind)
        self._data = bytes(data)
        self._js_class = kind

    @property
    def byteLength(self) -> int:
        return len(self._data)

    def __getattr__(self, name: str) -> Any:
        if name == "length" and self._js_class == "Uint8Array":
            return len(self._data)
        raise AttributeError(name)

    def __len__(self) -> int:
        if self._js_class != "Uint8Array":
            raise TypeError("object of type 'pyodide.ffi.JsBuffer' has no len()")
        return len(self._data)

    def to_bytes(self) -> bytes:
        return self._data

    def to_memoryview(self) -> memoryview:
        return memoryview(self._data)

    def to_string(self, encoding: str | None = None) -> str:
        return self._data.decode(encoding or "utf-8")

    def __repr__(self) -> str:
        if self._js_class == "ArrayBuffer":
            return "[object ArrayBuffer]"
        return ",".join(str(b) for b in self._data)

    def _to_py_shallow(self, convert: Callable[[Any], Any]) -> Any:
        return memoryview(self._data)


class JsDate(JsProxy):
    """A JavaScript Date (only ``getTime``/``valueOf``)."""

    _js_class = "Date"

    def __init__(self, millis: float) -> None:
        self._millis = float(millis)

    def getTime(self) -> Any:
        return js_to_py(self._millis)

    valueOf = getTime


class JsIterator(JsProxy):
    """A JavaScript iterator: Python iteration plus JS-style ``next()``."""

    _js_class = "Iterator"

    def __init__(self, source: Iterator[Any]) -> None:
        self._source = source

    def __iter__(self) -> JsIterator:
        return self

    def __next__(self) -> Any:
        return js_to_py(next(self._source))

    def next(self) -> JsObject:
        try:
            value = next(self._source)
        except StopIteration:
            return JsObject([("done", True), ("value", None)])
        return JsObject([("done", False), ("value", value)])


class JsPromise(JsProxy):
    """An already-settled JavaScript Promise; awaiting it gives the converted value."""

    _js_class = "Promise"

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value = value
        self._error = error

    def __await__(self) -> Generator[Any, None, Any]:
        if self._error is not None:
            raise self._error
        return js_to_py(self._value)
        yield  # pragma: no cover - makes this a generator

    def then(self, onfulfilled: Callable[[Any], Any] | None = None,
             onrejected: Callable[[BaseException], Any] | None = None) -> JsPromise:
        try:
            if self._error is not None:
                if onrejected is None:
                    return self
                return JsPromise(py_to_js(onrejected(self._error)))
            if onfulfilled is None:
                return self
            return JsPromise(py_to_js(onfulfilled(js_to_py(self._value))))
        except Exception as error:  # a throwing callback rejects the new promise
            return JsPromise(error=error)


class JsDoubleProxy(JsProxy):
    """A JsProxy of a PyProxy (``create_proxy`` / ``to_js`` of an unconvertible)."""

    _js_class = "PyProxy"

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    @property
    def typeof(self) -> str:
        return "function" if callable(self._obj) else "object"

    def unwrap(self) -> Any:
        return self._obj

    def destroy(self) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._obj(*args, **kwargs)

    def __repr__(self) -> str:
        return str(self._obj)


class JsSet(JsProxy):
    """A JavaScript Set (what ``to_js(set)`` gives); ``to_py()`` gives a Python set."""

    _js_class = "Set"

    def __init__(self, items: Iterable[Any] = ()) -> None:
        self._items = list(dict.fromkeys(items))

    @property
    def size(self) -> int:
        return len(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Any]:
        return (js_to_py(item) for item in list(self._items))

    def __repr__(self) -> str:
        return "[object Set]"

    def _to_py_shallow(self, convert: Callable[[Any], Any]) -> Any:
        return {convert(item) for item in self._items}


class JsMap(JsProxy):
    """A JavaScript Map (what ``to_js(dict)`` gives without ``dict_converter``)."""

    _js_class = "Map"

    def __init__(self, entries: Iterable[tuple[Any, Any]] = ()) -> None:
        self._entries = dict(entries)

    @property
    def size(self) -> int:
        return len(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, key: Any) -> Any:
        return js_to_py(self._entries[key])

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._entries))

    def __repr__(self) -> str:
        return "[object Map]"

    def _to_py_shallow(self, convert: Callable[[Any], Any]) -> Any:
        return {key: convert(value) for key, value in self._entries.items()}


# ---------------------------------------------------------------------------
# Conversions
# ---------------------------------------------------------------------------
def is_safe_integer(value: float) -> bool:
    """``Number.isSafeInteger``."""
    return math.isfinite(value) and value.is_integer() and abs(value) <= MAX_SAFE_INTEGER


def js_to_py(value: Any) -> Any:
    """Implicit JS -> Python conversion (a JS value read from Python)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        return int(value) if is_safe_integer(value) else value
    if isinstance(value, JsBigInt):
        return value.value
    if isinstance(value, PyProxy):
        return value.obj
    return value  # undefined (None), jsnull, str, JsProxy


def py_to_js(value: Any) -> Any:
    """Implicit Python -> JS conversion (an argument to a JS function, or a
    Python callback's return value).

    Pyodide 0.28.2 sends an ``int`` as a Number only when
    ``-(2**53 - 1) < x < 2**53 - 1`` and as a BigInt otherwise: the bounds
    themselves are BigInts (measured in real workerd; see
    ``python-workers-facts.md``, "Measured in real workerd").
    """
    if value is None or isinstance(value, (bool, str, JsNull, JsProxy)):
        return value
    if isinstance(value, int):
        if -MAX_SAFE_INTEGER < value < MAX_SAFE_INTEGER:
            return float(value)
        return JsBigInt(value)
    if isinstance(value, float):
        return value
    return PyProxy(value)


def _js_to_string(value: Any) -> str:
    if value is None:
        return ""
    if value is jsnull:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        converted = js_to_py(value)
        return repr(converted) if isinstance(converted, float) else str(converted)
    if isinstance(value, JsBigInt):
        return str(value.value)
    if isinstance(value, PyProxy):
        return str(value.obj)
    return str(value) if isinstance(value, str) else repr(value)


def _is_array_index(key: str) -> bool:
    return key.isdigit() and str(int(key)) == key and int(key) < 2**32 - 1


def _js_key_order(props: dict[str, Any]) -> dict[str, Any]:
    """Own-property order of a JS object: array-index keys ascending, then the
    other keys in insertion order."""
    indices = sorted((key for key in props if _is_array_index(key)), key=int)
    if not indices:
        return props
    ordered = {key: props[key] for key in indices}
    ordered.update((key, value) for key, value in props.items() if not _is_array_index(key))
    return ordered


def _to_py(
    value: Any,
    depth: int,
    default_converter: Callable[..., Any] | None,
    cache: dict[int, Any],
) -> Any:
    """``JsProxy.to_py`` on a JS-side value (mirrors js2python_convert)."""
    if not isinstance(value, JsProxy):
        return js_to_py(value)
    if depth == 0:
        return value
    key = id(value)
    if key in cache:
        return cache[key]

    def convert(child: Any) -> Any:
        return _to_py(child, depth - 1, default_converter, cache)

    result = value._to_py_shallow(convert)
    if result is not NotImplemented:
        cache[key] = result
        return result
    if default_converter is None:
        return value

    def cache_conversion(source: Any, converted: Any) -> None:
        cache[id(source)] = converted

    return default_converter(value, convert, cache_conversion)


def to_js(
    obj: Any,
    /,
    *,
    depth: int = -1,
    pyproxies: Any = None,
    create_pyproxies: bool = True,
    dict_converter: Callable[[Any], Any] | None = None,
    default_converter: Callable[[Any, Callable[[Any], Any], Callable[[Any, Any], None]], Any]
    | None = None,
    eager_converter: Any = None,
) -> Any:
    """``pyodide.ffi.to_js``: deep Python -> JS conversion.

    Immutables and JsProxies come back unchanged; list/tuple -> Array,
    dict -> Map (or ``dict_converter(entries)``), set -> Set, buffers (bytes,
    bytearray, memoryview) -> Uint8Array; anything else -> ``default_converter(obj, ...)``
    or, without one, a JsProxy of a PyProxy.
    """
    del pyproxies, eager_converter
    if obj is None or isinstance(obj, (bool, int, float, str, JsNull, JsProxy)):
        return obj
    js_value = _to_js_value(obj, depth, dict_converter, default_converter, create_pyproxies)
    return _python_view(js_value)


def _to_js_value(
    obj: Any,
    depth: int,
    dict_converter: Callable[[Any], Any] | None,
    default_converter: Callable[..., Any] | None,
    create_pyproxies: bool,
) -> Any:
    """Convert ``obj`` to a JS-side value (see the module docstring)."""
    if obj is None or isinstance(obj, (bool, int, float, str, JsNull, JsProxy)):
        return py_to_js(obj)
    if depth == 0:
        return _make_pyproxy(obj, create_pyproxies)

    def convert(child: Any) -> Any:
        return _to_js_value(child, depth - 1, dict_converter, default_converter, create_pyproxies)

    if isinstance(obj, (list, tuple)):
        return JsArray([convert(item) for item in obj])
    if isinstance(obj, dict):
        if dict_converter is not None:
            entries = JsArray([JsArray([py_to_js(key), convert(value)])
                               for key, value in obj.items()])
            return py_to_js(dict_converter(entries))
        return JsMap((py_to_js(key), convert(value)) for key, value in obj.items())
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return JsBuffer(bytes(obj), kind="Uint8Array")
    if isinstance(obj, (set, frozenset)):
        return JsSet(convert(item) for item in obj)
    if default_converter is not None:
        result = default_converter(
            obj, lambda child: _python_view(convert(child)), lambda _source, _result: None
        )
        return py_to_js(result)
    return _make_pyproxy(obj, create_pyproxies)


def _make_pyproxy(obj: Any, create_pyproxies: bool) -> Any:
    if not create_pyproxies:
        raise ConversionError(f"No conversion known for {obj!r} and create_pyproxies=False")
    return JsDoubleProxy(obj)


def _python_view(js_value: Any) -> Any:
    """What Python sees of a JS value ``to_js`` produced."""
    if isinstance(js_value, PyProxy):
        return JsDoubleProxy(js_value.obj)
    return js_to_py(js_value)


def object_from_entries(entries: Iterable[Any]) -> JsObject:
    """``Object.fromEntries`` (for ``to_js(..., dict_converter=...)``)."""
    pairs: list[tuple[str, Any]] = []
    for entry in entries:
        key, value = list(entry)
        pairs.append((_js_to_string(py_to_js(key)), py_to_js(value)))
    return JsObject(pairs)


def create_proxy(obj: Any, /, *, capture_this: bool = False, roundtrip: bool = True) -> Any:
    """``pyodide.ffi.create_proxy``."""
    del capture_this, roundtrip
    return JsDoubleProxy(obj)


def destroy_proxies(pyproxies: Any, /) -> None:
    """``pyodide.ffi.destroy_proxies`` (nothing to free here)."""
    del pyproxies


# ---------------------------------------------------------------------------
# Installing the fake as ``pyodide`` / ``pyodide.ffi``
# ---------------------------------------------------------------------------
_FFI_EXPORTS = (
    "ConversionError",
    "JsArray",
    "JsBuffer",
    "JsDoubleProxy",
    "JsException",
    "JsIterator",
    "JsMap",
    "JsNull",
    "JsPromise",
    "JsProxy",
    "JsSet",
    "create_proxy",
    "destroy_proxies",
    "jsnull",
    "to_js",
)
_MARKER = "__tickwork_fake__"


def _build_modules() -> tuple[types.ModuleType, types.ModuleType]:
    pyodide = types.ModuleType("pyodide", "Fake pyodide package (tests.support.fakes.pyodide_ffi).")
    ffi = types.ModuleType("pyodide.ffi", "Fake pyodide.ffi (tests.support.fakes.pyodide_ffi).")
    this = sys.modules[__name__]
    for name in _FFI_EXPORTS:
        setattr(ffi, name, getattr(this, name))
    setattr(ffi, "__all__", list(_FFI_EXPORTS))  # noqa: B010 - a fresh module
    setattr(pyodide, "ffi", ffi)  # noqa: B010
    setattr(pyodide, "__version__", FAKE_PYODIDE_VERSION)  # noqa: B010
    setattr(pyodide, "__path__", [])  # noqa: B010 - a package, so `import pyodide.ffi` works
    for module in (pyodide, ffi):
        setattr(module, _MARKER, True)
    return pyodide, ffi


def fake_pyodide_is_installed() -> bool:
    return getattr(sys.modules.get("pyodide"), _MARKER, False) is True


def install_fake_pyodide() -> types.ModuleType:
    """Register the fake as ``pyodide`` and ``pyodide.ffi`` in ``sys.modules``.

    Idempotent: a second call returns the already-installed module. Refuses
    to replace a different module called ``pyodide``. Returns ``pyodide.ffi``.
    """
    existing = sys.modules.get("pyodide")
    if existing is not None:
        if getattr(existing, _MARKER, False) is not True:
            raise RuntimeError("a real (or other) 'pyodide' module is already imported")
        ffi: types.ModuleType = sys.modules["pyodide.ffi"]
        return ffi
    pyodide, ffi = _build_modules()
    sys.modules["pyodide"] = pyodide
    sys.modules["pyodide.ffi"] = ffi
    return ffi


def uninstall_fake_pyodide() -> None:
    """Remove the fake from ``sys.modules`` (only if it is ours)."""
    for name in ("pyodide.ffi", "pyodide"):
        if getattr(sys.modules.get(name), _MARKER, False) is True:
            del sys.modules[name]


@contextlib.contextmanager
def fake_pyodide_installed() -> Iterator[types.ModuleType]:
    """Install the fake for the ``with`` block; afterwards restore the previous
    state (it stays installed only if it was installed before), so nesting is
    safe and nothing leaks into unrelated tests."""
    was_installed = fake_pyodide_is_installed()
    ffi = install_fake_pyodide()
    try:
        yield ffi
    finally:
        if not was_installed:
            uninstall_fake_pyodide()


#: ``with fake_pyodide(): ...`` -- the same context manager, shorter.
fake_pyodide = fake_pyodide_installed


@pytest.fixture
def fake_pyodide_ffi() -> Iterator[types.ModuleType]:
    """pytest fixture: the fake ``pyodide.ffi`` installed for one test.

    Make it visible with ``from tests.support.fakes.pyodide_ffi import fake_pyodide_ffi``
    in a conftest (or the test module), then request it by name.
    """
    with fake_pyodide_installed() as ffi:
        yield ffi
