"""``TickworkWorker``: a ``WorkerEntrypoint`` serving the /v1 API and the cron drain.

``fetch`` answers the API over the Worker's bindings (``TICKWORK_TOKEN``,
``JOB_OWNERS``, ``DB``; see ``tickwork.cloudflare.app``) and ``scheduled``
drains the shared D1 queues once per cron firing, under the cron lock.
"""

from __future__ import annotations

from typing import Any, ClassVar

from workers import WorkerEntrypoint  # type: ignore[import-not-found, unused-ignore]

from tickwork.cloudflare import app
from tickwork.cloudflare.app import DomainHook, ExecutorFactory
from tickwork.cloudflare.runtime_env import RuntimeEnv


class TickworkWorker(RuntimeEnv, WorkerEntrypoint):  # type: ignore[misc, unused-ignore]
    """The Worker's entrypoint. Make one with ``tickwork.cloudflare.worker_class``
    (or subclass and set ``_executors`` / ``_domain_statements``). ``self.env``
    is the runtime's env in one SDK wrapper, however many the SDK applied
    (``tickwork.cloudflare.runtime_env``)."""

    #: The deployment's ``(env) -> Executor`` (underscored: never an RPC method).
    _executors: ClassVar[ExecutorFactory | None] = None
    #: ``(env, jobs) -> D1 statements`` committed with a shared ingest, or None.
    _domain_statements: ClassVar[DomainHook | None] = None

    def _executor_factory(self) -> ExecutorFactory:
        executors = type(self)._executors
        if executors is None:
            raise TypeError(f"{type(self).__name__} has no executors: make the class with "
                            "tickwork.cloudflare.worker_class(executors)")
        return executors

    async def fetch(self, request: Any) -> Any:
        return await app.handle_fetch(self.env, request, executors=self._executor_factory(),
                                      domain_statements=type(self)._domain_statements)

    async def scheduled(self, controller: Any, env: Any = None, ctx: Any = None) -> None:
        # The runtime passes (controller), or (controller, env, ctx) on some
        # SDKs and dates; env is then the same env before any SDK wrapper, so
        # self.env (wrapped once) is used either way.
        del env, ctx
        await app.run_cron(self.env, controller, executors=self._executor_factory())
