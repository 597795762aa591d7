"""Stand-in for workerd's ``_cloudflare_compat_flags`` module (the real-Pyodide tier).

workerd exposes the compatibility flags of the Worker as attributes of this
module; the external SDK (``workers-runtime-sdk``) reads the few it knows.
The tier runs a Worker with none of them set (compatibility date
2026-04-01 and ``python_workers``), so every flag reads False.
"""


def __getattr__(name: str) -> bool:
    if name.startswith("__"):
        raise AttributeError(name)
    return False
