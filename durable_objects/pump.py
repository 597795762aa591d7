"""The reference deployment's ``SharedPump``: the Durable Object whose alarm
drains the shared D1 queues when their next waiting job falls due, running
this deployment's executors (``worker/executors.py``). Its behaviour is
``tickwork.cloudflare.SharedPump``'s."""

from __future__ import annotations

from tickwork.cloudflare import pump_class
from worker.executors import build_registry

__all__ = ["SharedPump"]

SharedPump = pump_class(build_registry)
