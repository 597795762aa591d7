"""The reference deployment's Worker: ``tickwork.cloudflare`` and its executors.

* ``worker/entry.py``: the main module (``wrangler.toml`` ``main``):
  ``Default`` (fetch and scheduled) and the ``JobOwner`` Durable Object class;
* ``worker/executors.py``: THE FILE YOU EDIT: executors and the domain hook.

Modules here import each other absolutely (``worker.executors``), so they
work whatever name the runtime gives the main module.
"""
