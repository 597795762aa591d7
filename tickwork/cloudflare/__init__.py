"""tickwork on Cloudflare Workers: the Durable Object, the Worker entrypoint,
and the ``fetch`` transport of the webhook executor.

A deployment's whole main module::

    from tickwork.cloudflare import job_owner_class, worker_class
    from my_jobs import build_registry          # (env) -> ExecutorRegistry

    JobOwner = job_owner_class(build_registry)  # binding JOB_OWNERS, class JobOwner
    SharedPump = pump_class(build_registry)     # binding TICKWORK_PUMP (optional)
    Default = worker_class(build_registry)      # the Worker's fetch, scheduled and queue

These modules import the Workers ``workers`` module, so they load inside a
Worker (or under a stand-in of it), never by accident on CPython.
"""

from __future__ import annotations

from tickwork.api.rpc import rpc_methods
from tickwork.cloudflare.app import DomainHook, ExecutorFactory
from tickwork.cloudflare.http import workers_fetch_post
from tickwork.cloudflare.job_owner import JobOwner
from tickwork.cloudflare.pump import SharedPump
from tickwork.cloudflare.worker import TickworkWorker
from tickwork.model.errors import InvalidArgument

__all__ = [
    "DomainHook",
    "ExecutorFactory",
    "JobOwner",
    "SharedPump",
    "TickworkWorker",
    "job_owner_class",
    "pump_class",
    "worker_class",
    "workers_fetch_post",
]


def job_owner_class(executors: ExecutorFactory, *, name: str = "JobOwner") -> type[JobOwner]:
    """A ``JobOwner`` Durable Object class whose jobs run on ``executors(env)``.

    Export it from the Worker's main module under the ``class_name`` of its
    binding. The RPC methods are defined on the new class itself (some workerd
    versions list only a class's own methods)."""
    _check_callable("executors", executors)
    # The alarm handler too is defined on the class itself, for the same reason.
    made = type(name, (JobOwner,), {"_executors": staticmethod(executors),
                                     "alarm": JobOwner.alarm,
                                     "__module__": JobOwner.__module__, "__qualname__": name})
    return rpc_methods(made)


def pump_class(executors: ExecutorFactory, *, name: str = "SharedPump") -> type[SharedPump]:
    """A ``SharedPump`` Durable Object class (binding ``TICKWORK_PUMP``) whose
    alarm drains the shared D1 queues on ``executors(env)`` when their next
    waiting job falls due. Export it from the main module under its
    ``class_name``."""
    _check_callable("executors", executors)
    # arm and alarm on the class itself, as for JobOwner.
    return type(name, (SharedPump,), {"_executors": staticmethod(executors),
                                      "arm": SharedPump.arm, "alarm": SharedPump.alarm,
                                      "__module__": SharedPump.__module__,
                                      "__qualname__": name})


def worker_class(executors: ExecutorFactory, *, domain_statements: DomainHook | None = None,
                 name: str = "Default") -> type[TickworkWorker]:
    """A Worker entrypoint class serving the /v1 API and draining the shared
    queues (after a write, on the cron, for a Queues batch), running
    shared jobs on ``executors(env)``; ``domain_statements(env, jobs)`` (optional)
    returns D1 statements that commit in the same batch as a shared ingest."""
    _check_callable("executors", executors)
    if domain_statements is not None:
        _check_callable("domain_statements", domain_statements)
    attributes: dict[str, object] = {"_executors": staticmethod(executors),
                                     # the handlers on the class itself, as for JobOwner
                                     "fetch": TickworkWorker.fetch,
                                     "scheduled": TickworkWorker.scheduled,
                                     "queue": TickworkWorker.queue,
                                     "__module__": TickworkWorker.__module__,
                                     "__qualname__": name}
    if domain_statements is not None:
        attributes["_domain_statements"] = staticmethod(domain_statements)
    return type(name, (TickworkWorker,), attributes)


def _check_callable(name: str, value: object) -> None:
    if not callable(value):
        raise InvalidArgument(name, f"must be a function of env, got {type(value).__name__}")
