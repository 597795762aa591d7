"""The runtimes: each drives the lifecycle (``tickwork.lifecycle``) over one kind of store.

* ``owner_local``: ``OwnerRuntime`` over one owner's synchronous SQLite database;
* ``shared``: ``SharedRuntime`` over a job table many workers share, with leases;
* ``d1`` and ``postgres``: the shared runtime on D1 and on PostgreSQL;
* ``draining``: the drain loop every runtime's ``drain()`` and the hosts' tick
  loop run, with its one budget rule.
"""
