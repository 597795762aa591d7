"""The local CPython host: ``tickwork serve`` and ``tickwork inspect``.

CPython only. These modules import ``sqlite3``, ``ssl``, ``fcntl`` and
``signal``, so they are never part of the Workers bundle. Outside this
package only the other CPython-only entry points use any of them:
``tickwork/demo.py`` imports ``sqlite3`` and ``signal``, and
``tickwork/__main__.py`` imports this package. No other tickwork module
imports them (``tests/unit/test_workers_safety.py`` keeps it so for
``sqlite3`` and ``ssl``).

* ``serve``: the /v1 HTTP API (``tickwork.api.JobApi``, the same routes the
  Worker serves) on an asyncio HTTP/1.1 server, owner-local jobs in one
  sqlite3 file per owner (``owners``), and optionally the shared queues on
  PostgreSQL (``shared``).
* ``inspect_cli``: queue and job status in the terminal, through the HTTP
  API, so it works against a deployed Worker too.
* ``actions_cli``: ``tickwork jobs``, ``queues`` and ``schedules``, the
  actions (list, cancel, redrive, pause, resume, delete), the same way.
* ``api_commands``: what the commands calling the API share: ``--url``,
  ``--token``, the scope, error messages and exit codes.
* ``http_server`` / ``http_client``: the HTTP/1.1 transport, both ways, on
  asyncio streams.
* ``examples``: the default executors of ``tickwork serve``.
* ``sqlite_files``: ``open_sqlite3``, a sqlite3 file opened with tickwork's
  settings (page size, WAL, synchronous), for any CPython host.
* ``event_buffer``: ``EventBuffer``, an event hook delivered on a thread of
  its own, so a slow hook never slows the engine.
"""

from tickwork.hosts.cpython.event_buffer import EventBuffer
from tickwork.hosts.cpython.sqlite_files import open_sqlite3

__all__ = ["EventBuffer", "open_sqlite3"]
