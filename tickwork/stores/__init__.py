"""The store adapters, and the SQL they run.

* ``sqlite3_database``, ``durable_object_database``: synchronous SQLite
  databases (Python's sqlite3, a Durable Object's ``ctx.storage``);
* ``owner_local``: the owner-local job table over such a database;
* ``d1``, ``postgres``: the shared job table on D1 and on PostgreSQL;
* ``sql``: every statement, one source per dialect family.
"""

from tickwork.stores.durable_object_database import DurableObjectDatabase
from tickwork.stores.sqlite3_database import Sqlite3Database

__all__ = ["DurableObjectDatabase", "Sqlite3Database"]
