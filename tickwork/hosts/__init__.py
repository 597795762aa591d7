"""Hosts: what runs a runtime in a process.

* ``ticking``: the tick loop of a host with an owner (the ``JobOwner`` Durable
  Object and ``tickwork serve`` share it);
* ``cpython``: ``tickwork serve``, the local CPython host with the Worker's HTTP API.

The Cloudflare host itself lives at the top of the repository: ``worker/``
(the Worker) and ``durable_objects/`` (the ``JobOwner`` Durable Object).
"""
