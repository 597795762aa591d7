"""Test stand-ins for the Cloudflare runtime (Durable Object storage, pyodide.ffi)."""

from .do_storage import (
    EvictedStorageError,
    FakeDurableObjectStorage,
    StricterThanWorkersError,
)
from .pyodide_ffi import (
    JsException,
    fake_pyodide,
    fake_pyodide_ffi,
    fake_pyodide_installed,
    install_fake_pyodide,
    jsnull,
    to_js,
    uninstall_fake_pyodide,
)

__all__ = [
    "EvictedStorageError",
    "FakeDurableObjectStorage",
    "JsException",
    "StricterThanWorkersError",
    "fake_pyodide",
    "fake_pyodide_ffi",
    "fake_pyodide_installed",
    "install_fake_pyodide",
    "jsnull",
    "to_js",
    "uninstall_fake_pyodide",
]
