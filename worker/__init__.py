"""The tickwork Worker: the /v1 HTTP API and the cron drain of the shared queues.

* ``worker/entry.py``: the Worker's main module (``wrangler.toml`` ``main``),
  ``Default`` with ``fetch`` and ``scheduled``, and the ``JobOwner`` Durable
  Object class exported next to it;
* ``worker/app.py``: the plumbing (bindings, request/response adapters, the
  shared D1 service, the locked cron drain);
* ``worker/http.py``: the webhook transport over the Workers ``fetch``;
* ``worker/executors.py``: THE FILE YOU EDIT: executors and the domain hook.

Modules here import each other absolutely (``worker.app``), so they work
whatever name the runtime gives the main module.
"""
