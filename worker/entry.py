"""The Worker's main module (``main = "worker/entry.py"`` in ``wrangler.toml``).

``Default.fetch`` serves the /v1 API (``tickwork.api``) over this Worker's
bindings; ``Default.scheduled`` drains the shared D1 queues once per cron
firing, under a lock (see ``worker/app.py`` for both). ``JobOwner`` is
imported here because Workers only find a Durable Object class exported
from the main module.

wrangler uploads the main module under its base name (``entry``), not as
``worker.entry``, so every import here is absolute.
"""

from __future__ import annotations

from typing import Any

from workers import WorkerEntrypoint  # type: ignore[import-not-found, unused-ignore]

from durable_objects.job_owner import JobOwner
from worker import app

__all__ = ["Default", "JobOwner"]


class Default(WorkerEntrypoint):  # type: ignore[misc, unused-ignore]
    async def fetch(self, request: Any) -> Any:
        return await app.handle_fetch(self.env, request)

    async def scheduled(self, controller: Any, env: Any = None, ctx: Any = None) -> None:
        # The runtime passes (controller) or (controller, env, ctx), depending
        # on the SDK and the compatibility date; self.env is the same env.
        await app.run_cron(env if env is not None else self.env, controller)
