"""Hosts: what runs a runtime in a process.

* ``ticking``: the tick loop of a host with an owner (the ``JobOwner`` Durable
  Object and ``tickwork serve`` share it);
* ``cpython``: ``tickwork serve``, the local CPython host with the Worker's HTTP API.

The Cloudflare host is ``tickwork.cloudflare`` (the Worker entrypoint and the
``JobOwner`` Durable Object; it imports the Workers ``workers`` module, so it
sits apart from the CPython host); ``worker/`` and ``durable_objects/`` at the
top of the repository are the reference deployment built from it.
"""
