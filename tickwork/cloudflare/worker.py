"""``TickworkWorker``: a ``WorkerEntrypoint`` serving the /v1 API and draining the shared queues.

``fetch`` answers the API over the Worker's bindings (``TICKWORK_TOKEN``,
``JOB_OWNERS``, ``DB``; see ``tickwork.cloudflare.app``) and, after a write
that may have made shared work due, drains the shared D1 queues in
``waitUntil``; ``scheduled`` runs a cron firing (``app.run_cron``) and
``queue`` drains for a Cloudflare Queues batch (``TICKWORK_QUEUE``; see
``tickwork.cloudflare.shared_drains``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from workers import WorkerEntrypoint  # type: ignore[import-not-found, unused-ignore]

from tickwork.cloudflare import app, shared_drains
from tickwork.cloudflare.app import DomainHook, ExecutorFactory
from tickwork.cloudflare.bindings import event_log
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
        executors = self._executor_factory()
        env = self.env

        def drain_after_answer() -> None:
            # The answer never waits: the drain runs in waitUntil once the
            # handler has returned (see tickwork.cloudflare.shared_drains).
            shared_drains.keep_alive(self.ctx, shared_drains.after_shared_write(
                env, executors, on_event=event_log(env)))

        return await app.handle_fetch(env, request, executors=executors,
                                      domain_statements=type(self)._domain_statements,
                                      on_shared_write=drain_after_answer)

    async def queue(self, batch: Any, env: Any = None, ctx: Any = None) -> None:
        """A Cloudflare Queues batch (binding ``TICKWORK_QUEUE``): each message
        says shared work arrived; one drain within ``QUEUE_DRAIN`` serves the
        whole batch. The batch is acknowledged once the drain returns, and
        retried (redelivered later) when it raised."""
        del env, ctx
        await shared_drains.drain_queue_batch(self.env, batch, self._executor_factory())

    async def scheduled(self, controller: Any, env: Any = None, ctx: Any = None) -> None:
        # The runtime passes (controller), or (controller, env, ctx) on some
        # SDKs and dates; env is then the same env before any SDK wrapper, so
        # self.env (wrapped once) is used either way.
        del env, ctx
        await app.run_cron(self.env, controller, executors=self._executor_factory())
