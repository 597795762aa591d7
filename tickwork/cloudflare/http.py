"""``workers_fetch_post``: the webhook executor's ``HttpPost`` over the Workers ``fetch``.

One POST with ``redirect: "manual"`` (a 3xx comes back as the reply; the
executor fails it with its code), the tickwork abort signal forwarded to a JS
``AbortController``, and a timeout from ``asyncio.wait_for`` that also
aborts the request. ``workers`` and ``js`` are imported when the first
request is sent, never at import time, so the module loads anywhere.

Errors, and how sure we are:

* the timeout (ours) -> ``HttpTimeout``: the request may have been sent;
* an abort through the signal -> ``HttpTimeout`` as well (the executor has
  already stopped waiting and reports ``OutcomeUnknown``);
* a rejected ``fetch``: the Workers runtime does not say whether bytes left.
  Depending on the Pyodide version it surfaces as ``OSError`` (Pyodide 0.26)
  or ``pyodide.http.AbortError`` (an ``OSError``, Pyodide >= 0.27) or a bare
  ``JsException``, with only JavaScript's message to go on. Messages that
  can only come before sending (an invalid URL, "Fetch API cannot load", a
  DNS failure, a refused connection) become ``HttpUnreachable``; everything
  else, notably "Network connection lost", becomes ``HttpTimeout``, which the
  executor records as ``OutcomeUnknown``. Not confirmed against a real
  workerd: origin DNS and connection failures may also arrive as a 5xx/530
  reply from Cloudflare, which the executor records as ``OutcomeUnknown`` too.
  When in doubt the mapping says "unknown", never "nothing was sent".
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from tickwork._pyodide import fetch_error_message, fetch_never_sent
from tickwork.executors.webhook import HttpReply, HttpTimeout, HttpUnreachable
from tickwork.model.signals import AbortSignal

__all__ = ["workers_fetch_post"]


async def workers_fetch_post(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    timeout_s: float,
    signal: AbortSignal,
) -> HttpReply:
    """POST ``body`` to ``url`` through the Workers ``fetch`` (an ``HttpPost``)."""
    from js import AbortController  # type: ignore[import-not-found, unused-ignore]
    from workers import fetch  # type: ignore[import-not-found, unused-ignore]

    controller = AbortController.new()

    def forward_abort(reason: str) -> None:
        controller.abort(reason)

    signal.on_abort(forward_abort)

    async def exchange() -> HttpReply:
        response = await fetch(
            url,
            method="POST",
            headers=dict(headers),
            body=_body_for_fetch(body),
            redirect="manual",
            signal=controller.signal,
        )
        text = await response.text()
        # A missing header is JS null (jsnull: not None, and truthy).
        retry_after = response.headers.get("retry-after")
        return HttpReply(int(response.status), str(text),
                         retry_after if isinstance(retry_after, str) else None)

    try:
        return await asyncio.wait_for(exchange(), timeout_s)
    except TimeoutError:  # asyncio.TimeoutError is TimeoutError on 3.11+
        controller.abort("timeout")
        raise HttpTimeout(f"no reply from the receiver within {timeout_s:g} s") from None
    except asyncio.CancelledError:
        controller.abort("cancelled")
        raise
    except Exception as error:
        if signal.aborted:
            raise HttpTimeout(f"aborted ({signal.reason}) while the request was in flight") \
                from error
        raise classify_fetch_error(error) from error


def classify_fetch_error(error: BaseException) -> HttpTimeout | HttpUnreachable:
    """``HttpUnreachable`` when ``error``'s message proves nothing was sent, else
    ``HttpTimeout`` (the request may have been sent)."""
    message = fetch_error_message(error)
    if fetch_never_sent(error):
        return HttpUnreachable(message)
    return HttpTimeout(f"fetch failed, the request may have been sent: {message}")


def _body_for_fetch(body: bytes) -> Any:
    # A str crosses to JS as a string in every SDK; webhook bodies are UTF-8 JSON.
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body
