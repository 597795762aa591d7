"""The runtimes: each drives the lifecycle (``tickwork.lifecycle``) over one kind of store.

* ``owner_local``: ``OwnerRuntime`` over one owner's synchronous SQLite database;
* ``shared``: ``SharedRuntime`` over a job table many workers share, with leases;
* ``d1`` and ``postgres``: the shared runtime on D1 and on PostgreSQL.
"""
