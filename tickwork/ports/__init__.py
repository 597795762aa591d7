"""The ports: what a store or a host must provide for a runtime to drive the lifecycle.

* ``database``: a synchronous SQLite database (the owner-local runtime's store);
* ``shared_store``: the job table shared by many workers (D1, PostgreSQL);
* ``host``: what the host hands a runtime (executor, liveness probe, wake, projector).
"""
