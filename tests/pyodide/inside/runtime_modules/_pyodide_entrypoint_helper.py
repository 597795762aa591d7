"""Stand-in for workerd's ``_pyodide_entrypoint_helper`` module (the real-Pyodide tier).

The external SDK (``workers-runtime-sdk``) imports it for a few runtime
hooks. What tickwork's code reaches, and what this module gives:

* ``patchWaitUntil(ctx)``: workerd lets ``ctx.waitUntil`` take a Python
  awaitable; tickwork never calls ``waitUntil``, so this changes nothing.
* ``cloudflareWorkersModule``: the ``cloudflare:workers`` module, read only
  by ``from workers import env`` / ``wait_until`` (tickwork uses neither):
  an empty object, so such a read fails loudly.

Anything else is missing on purpose: an SDK path that needs it fails the
case, rather than running against an invented hook.
"""

from typing import Any

import js  # type: ignore[import-not-found]

cloudflareWorkersModule: Any = js.Object.new()
cloudflareSocketsModule: Any = js.Object.new()


def patchWaitUntil(ctx: Any) -> None:
    return None
