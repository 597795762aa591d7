"""A real, throwaway PostgreSQL server for tests and benchmarks.

``PostgresServer.start()`` finds the server binaries of Debian's ``postgresql``
package (``pg_config --bindir``, then ``/usr/lib/postgresql/*/bin``, then
``PATH``), runs ``initdb`` into a fresh temporary directory and starts
``postgres`` on a free loopback TCP port (``127.0.0.1`` only, no Unix socket),
with trust authentication for the ``postgres`` superuser role.

Durability is PostgreSQL's default and is never weakened: ``fsync``,
``synchronous_commit`` and ``full_page_writes`` stay ``on`` (they are even
passed explicitly), so every commit waits for its WAL fdatasync and benchmark
figures are honest. The only shortcut is ``initdb --no-sync``: initdb does not
flush the files it generates, which costs nothing in honesty because the server
itself still fsyncs every commit and checkpoint. (Put the data directory on a
real disk: on tmpfs an fsync is free. ``TICKWORK_PG_TMPDIR`` chooses the
parent directory; ``data_directory_filesystem()`` reports what it is.)

PostgreSQL refuses to run as root. When this process is root, initdb and the
server run as the ``postgres`` system user the Debian package creates (or the
user named by ``TICKWORK_PG_OS_USER``); otherwise they run as the current user.

Clean-up. ``stop()`` (also called at interpreter exit, and by the context
manager) stops the server with an immediate shutdown (no checkpoint: the data
is thrown away) and deletes the directory. If this process is killed outright
(SIGKILL, OOM) no Python code runs, so every server also has a small watchdog
process in its own session: it holds the read end of a pipe whose write end
only this process has, and when the pipe reaches end of file (this process
closed it in ``stop()``, or the kernel closed it because the process died)
the watchdog shuts the server down and removes the directory. Only a kill of
the watchdog itself together with this process can leave a
``tickwork-pg-*`` directory and its ``postgres`` behind.

``TICKWORK_PG_DSN`` (see ``start_postgres()``) points the tests at an existing
server instead, through a role that may create databases.

This module imports only the standard library at import time (psycopg is
imported when a database is created), and has no pytest dependency, so the
benchmarks can use it too.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, Self

INSTALL_HINT = (
    "install the PostgreSQL server: `apt-get install -y postgresql` (Debian/Ubuntu), "
    "or set TICKWORK_PG_BINDIR to a directory holding initdb and postgres, "
    "or set TICKWORK_PG_DSN to an existing server"
)
SUPERUSER = "postgres"  # the database role initdb creates (-U)
MAINTENANCE_DB = "postgres"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0

# Settings for a test server. Durability settings are PostgreSQL's defaults,
# spelled out so no configuration file can weaken them.
SERVER_SETTINGS: dict[str, str] = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",  # TCP only: no socket path length or permission issues
    "max_connections": "100",
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "timezone": "UTC",
    "log_timezone": "UTC",
    "log_min_messages": "warning",
    "logging_collector": "off",  # stderr goes to <dir>/postgres.log
}


class PostgresNotFound(RuntimeError):
    """The PostgreSQL server binaries are not installed (or not found)."""


class PostgresStartError(RuntimeError):
    """initdb or the server failed; the message carries the server log tail."""


class PostgresCluster(Protocol):
    """What tests and benchmarks need from a server, local or external."""

    def dsn(self, dbname: str = MAINTENANCE_DB) -> str: ...
    def create_database(self, name: str, template: str | None = None) -> str: ...
    def drop_database(self, name: str) -> None: ...
    def execute_admin(self, statement: Any,
                      params: Sequence[Any] | None = None) -> list[Any]: ...
    def data_directory_filesystem(self) -> str: ...
    def stop(self) -> None: ...


def find_bindir() -> Path:
    """The directory holding ``initdb`` and ``postgres``, or ``PostgresNotFound``."""
    candidates: list[Path] = []
    explicit = os.environ.get("TICKWORK_PG_BINDIR")
    if explicit:
        candidates.append(Path(explicit))
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                 timeout=10, check=True).stdout.strip()
            if out:
                candidates.append(Path(out))

    def version_key(path: str) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", path))

    candidates.extend(Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                                              key=version_key, reverse=True))
    on_path = shutil.which("postgres") or shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    looked = ", ".join(str(c) for c in candidates) or "nowhere"
    raise PostgresNotFound(
        f"PostgreSQL server binaries (initdb, postgres) not found (looked in: {looked}); "
        + INSTALL_HINT)


def _server_os_user() -> tuple[str, int, int] | None:
    """``(name, uid, gid)`` to run the server as, or None for the current user."""
    if os.geteuid() != 0:
        return None
    import pwd

    name = os.environ.get("TICKWORK_PG_OS_USER", "postgres")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise PostgresStartError(
            f"running as root, and PostgreSQL refuses to: the server must run as a non-root "
            f"user, but there is no user {name!r}. `apt-get install -y postgresql` creates "
            f"'postgres'; or `useradd --system --user-group --no-create-home {name}`; or set "
            f"TICKWORK_PG_OS_USER to an existing non-root user.") from None
    if entry.pw_uid == 0:
        raise PostgresStartError(f"TICKWORK_PG_OS_USER={name!r} is root; choose a non-root user")
    return entry.pw_name, entry.pw_uid, entry.pw_gid


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _clean_env() -> dict[str, str]:
    """The environment for initdb/postgres: no PG* variables, a C locale."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    return env


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        first = (data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
        return int(first)
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _shutdown_postmaster(data_dir: Path, timeout: float) -> None:
    """Immediate shutdown (SIGQUIT), then SIGKILL, of the postmaster that owns
    ``data_dir``. Uses ``postmaster.pid``, which the server removes when it exits,
    so a recycled pid is never signalled after a clean exit."""
    pid = _postmaster_pid(data_dir)
    if pid is None:
        return
    for sig, wait in ((signal.SIGQUIT, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _pid_alive(pid) or _postmaster_pid(data_dir) != pid:
                return
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap, when it is our child
            time.sleep(0.02)


class _Terminated(Exception):
    pass


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated


def _watchdog_main(data_dir: str, root_dir: str) -> None:
    """Runs in the watchdog process: wait for EOF on stdin, then clean up.
    Terminal signals are ignored; SIGTERM cleans up at once."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _raise_terminated)
    with contextlib.suppress(OSError, _Terminated):
        while sys.stdin.buffer.read(4096):
            pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _shutdown_postmaster(Path(data_dir), STOP_TIMEOUT_S)
    shutil.rmtree(root_dir, ignore_errors=True)


def _release_watchdog(watchdog: subprocess.Popen[bytes] | None) -> None:
    """Close the watchdog's pipe (EOF: it cleans up whatever is left, then exits)."""
    if watchdog is None:
        return
    with contextlib.suppress(OSError):
        assert watchdog.stdin is not None
        watchdog.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        watchdog.wait(timeout=STOP_TIMEOUT_S)


class _DatabaseAdmin:
    """Database management over one autocommit connection to the maintenance database."""

    maintenance_db = MAINTENANCE_DB

    def __init__(self) -> None:
        self._admin: Any = None  # psycopg.Connection, opened on first use
        self._lock = threading.Lock()

    def dsn(self, dbname: str = MAINTENANCE_DB) -> str:
        raise NotImplementedError

    def _admin_connection(self) -> Any:
        import psycopg

        if self._admin is None or self._admin.closed:
            self._admin = psycopg.connect(self.dsn(self.maintenance_db), autocommit=True)
        return self._admin

    def execute_admin(self, statement: Any, params: Sequence[Any] | None = None) -> list[Any]:
        """Run one statement on the maintenance database (autocommit); its rows."""
        with self._lock:
            cursor = self._admin_connection().execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def create_database(self, name: str, template: str | None = None) -> str:
        """``CREATE DATABASE name [TEMPLATE template]``; returns its DSN.
        The template must have no open connections while it is copied."""
        from psycopg import sql

        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        self.execute_admin(statement)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        """``DROP DATABASE IF EXISTS name WITH (FORCE)``: sessions still open are ended.

        A backend whose client just disconnected takes a moment to exit, and
        DROP DATABASE, finding it, sleeps in 100 ms steps; waiting a few
        milliseconds for such backends first keeps a drop at about 7 ms."""
        from psycopg import sql

        deadline = time.monotonic() + 0.25
        while time.monotonic() < deadline and self.execute_admin(
                "SELECT 1 FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,)):
            time.sleep(0.002)
        self.execute_admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))

    def _close_admin(self) -> None:
        with self._lock:
            if self._admin is not None:
                with contextlib.suppress(Exception):
                    self._admin.close()
                self._admin = None


class PostgresServer(_DatabaseAdmin):
    """One throwaway PostgreSQL server: ``start()``, use ``dsn()``, ``stop()``.

    ``with PostgresServer.start() as server: ...`` stops it on exit.
    """

    def __init__(self, bindir: Path, root: Path, port: int, process: subprocess.Popen[bytes],
                 watchdog: subprocess.Popen[bytes] | None, os_user: str,
                 started_in: float) -> None:
        self.bindir = bindir
        self.root = root
        self.data_dir = root / "data"
        self.log_path = root / "postgres.log"
        self.host = "127.0.0.1"
        self.port = port
        self.user = SUPERUSER
        self.os_user = os_user
        self.started_in = started_in  # seconds, initdb included
        self._process = process
        self._watchdog = watchdog
        self._stopped = False
        super().__init__()
        import atexit

        atexit.register(self.stop)

    # -- start-up ---------------------------------------------------------------------------

    @classmethod
    def start(cls, *, settings: dict[str, str] | None = None,
              base_dir: str | os.PathLike[str] | None = None) -> Self:
        """initdb a fresh cluster and start it; raises ``PostgresNotFound`` when the
        binaries are missing and ``PostgresStartError`` when the server does not come up."""
        began = time.perf_counter()
        bindir = find_bindir()
        account = _server_os_user()
        os_user = account[0] if account else _current_user()
        base = base_dir or os.environ.get("TICKWORK_PG_TMPDIR") or None
        root = Path(tempfile.mkdtemp(prefix="tickwork-pg-", dir=base))
        data_dir = root / "data"
        run_as: dict[str, Any] = {}
        if account:
            os.chown(root, account[1], account[2])
            run_as = {"user": account[1], "group": account[2], "extra_groups": []}
        # From here on, a kill of this process is cleaned up by the watchdog.
        watchdog = cls._spawn_watchdog(root)
        try:
            initdb = subprocess.run(
                [str(bindir / "initdb"), "-D", str(data_dir), "-U", SUPERUSER,
                 "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync",
                 "--no-instructions"],
                capture_output=True, text=True, cwd=root, env=_clean_env(), timeout=120,
                **run_as)
            if initdb.returncode != 0:
                raise PostgresStartError(
                    f"initdb failed ({initdb.returncode}) as user {os_user!r} in {root}"
                    f" (every parent directory must be searchable by that user; choose"
                    f" another with TICKWORK_PG_TMPDIR):\n{initdb.stdout}\n{initdb.stderr}")
            merged = {**SERVER_SETTINGS, **(settings or {})}
            last_error: PostgresStartError | None = None
            for _attempt in range(5):  # another process may take the free port first
                port = _free_port()
                try:
                    process = cls._launch(bindir, root, port, merged, run_as)
                except PostgresStartError as error:
                    last_error = error
                    if "could not bind" in str(error) or "already in use" in str(error):
                        continue
                    raise
                return cls(bindir, root, port, process, watchdog, os_user,
                           time.perf_counter() - began)
            assert last_error is not None
            raise last_error
        except BaseException:
            _shutdown_postmaster(data_dir, STOP_TIMEOUT_S)
            shutil.rmtree(root, ignore_errors=True)
            _release_watchdog(watchdog)
            raise

    @staticmethod
    def _launch(bindir: Path, root: Path, port: int, settings: dict[str, str],
                run_as: dict[str, Any]) -> subprocess.Popen[bytes]:
        data_dir = root / "data"
        args = [str(bindir / "postgres"), "-D", str(data_dir), "-p", str(port)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        log_path = root / "postgres.log"
        with open(log_path, "ab") as log:
            # A new session: a Ctrl-C meant for pytest does not reach the server;
            # stop() and the watchdog shut it down instead.
            process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                       cwd=root, env=_clean_env(), start_new_session=True,
                                       **run_as)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise PostgresStartError(
                    f"postgres exited with {process.returncode} while starting:\n"
                    + _tail(log_path))
            if _pid_file_status(data_dir) == "ready":
                return process
            time.sleep(0.01)
        process.kill()
        process.wait()
        raise PostgresStartError(f"postgres not ready after {START_TIMEOUT_S}s:\n"
                                 + _tail(log_path))

    @staticmethod
    def _spawn_watchdog(root: Path) -> subprocess.Popen[bytes] | None:
        try:
            return subprocess.Popen(
                [sys.executable, "-I", str(Path(__file__).resolve()), "--watchdog",
                 str(root / "data"), str(root)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True)
        except OSError:
            return None  # stop() and atexit still clean up

    # -- connection strings and databases ---------------------------------------------------

    def dsn(self, dbname: str = MAINTENANCE_DB) -> str:
        """A libpq key/value connection string for ``dbname`` on this server."""
        return f"host={self.host} port={self.port} user={self.user} dbname={dbname}"

    # -- introspection ----------------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The postmaster's process id."""
        return self._process.pid

    def data_directory_filesystem(self) -> str:
        """The filesystem type under the data directory (``ext4``, ``tmpfs``...)."""
        return filesystem_type(self.data_dir)

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)

    # -- shutdown ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the server and delete its directory. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._close_admin()
        _shutdown_postmaster(self.data_dir, STOP_TIMEOUT_S)
        if self._process.poll() is None:
            self._process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=STOP_TIMEOUT_S)
        shutil.rmtree(self.root, ignore_errors=True)
        _release_watchdog(self._watchdog)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<PostgresServer {self.host}:{self.port} as {self.os_user} in {self.root}>"


class ExternalPostgres(_DatabaseAdmin):
    """An existing server named by a DSN (``TICKWORK_PG_DSN``); the role must be able
    to create databases. ``stop()`` closes our connection; the server is not ours."""

    def __init__(self, dsn: str) -> None:
        from psycopg.conninfo import conninfo_to_dict

        super().__init__()
        self._base = dsn
        self.maintenance_db = str(conninfo_to_dict(dsn).get("dbname") or MAINTENANCE_DB)
        self.started_in = 0.0

    def dsn(self, dbname: str = MAINTENANCE_DB) -> str:
        from psycopg.conninfo import make_conninfo

        return make_conninfo(self._base, dbname=dbname)

    def data_directory_filesystem(self) -> str:
        return "unknown (external server)"

    def stop(self) -> None:
        self._close_admin()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_postgres() -> PostgresServer | ExternalPostgres:
    """``ExternalPostgres(TICKWORK_PG_DSN)`` when that is set, else a fresh local server."""
    external = os.environ.get("TICKWORK_PG_DSN")
    if external:
        return ExternalPostgres(external)
    return PostgresServer.start()


def filesystem_type(path: Path) -> str:
    """The type of the filesystem holding ``path``, from /proc/mounts (Linux)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    target = os.path.realpath(path)
    best, kind = "", "unknown"
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point = fields[1].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, kind = mount_point, fields[2]
    return kind


def _pid_file_status(data_dir: Path) -> str | None:
    """Line 8 of postmaster.pid: ``starting``, ``ready``, ``stopping``..."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
    except OSError:
        return None
    return lines[7].strip() if len(lines) >= 8 else None


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _current_user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer | ExternalPostgres]:
    """``with running_postgres() as server:`` (external when ``TICKWORK_PG_DSN`` is set)."""
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


_database_numbers = itertools.count(1)


def unique_database_name(prefix: str = "tickwork") -> str:
    """A database name no other process or test uses (pid and a counter; <= 63 bytes)."""
    return f"{prefix[:30]}_{os.getpid()}_{next(_database_numbers)}"


@contextlib.contextmanager
def fresh_database(server: PostgresCluster, *, template: str | None = None,
                   prefix: str = "tickwork") -> Iterator[str]:
    """A new database (copied from ``template``, default ``template1``), yielding its
    DSN; dropped afterwards, with any sessions still connected to it."""
    name = unique_database_name(prefix)
    dsn = server.create_database(name, template)
    try:
        yield dsn
    finally:
        server.drop_database(name)


def schema_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The ``*.sql`` files of ``directory`` in name order (migration order)."""
    return sorted(Path(directory).glob("*.sql"))


def apply_sql_files(dsn: str, sql_files: Sequence[str | os.PathLike[str]]) -> None:
    """Run each file's whole text as one script, in order, each in its own transaction."""
    import psycopg

    with psycopg.connect(dsn) as connection:
        for path in sql_files:
            text = Path(path).read_text()
            try:
                connection.execute(text.encode())  # no parameters: one simple-query script
                connection.commit()
            except psycopg.Error as error:
                raise RuntimeError(f"applying {path}: {error}") from error


class TemplateRegistry:
    """Template databases built from lists of SQL files, one per distinct content.

    ``template_for([])`` is ``None`` (PostgreSQL's default ``template1``);
    ``template_for(files)`` builds ``tickwork_tpl_<pid>_<n>`` from ``template1``
    by applying the files in order, the first time that list of contents is seen,
    then disallows connections to it so it can always be copied. Copying a
    template costs the same as copying ``template1`` (about 45 ms here), so a
    schema costs a test nothing once the template exists. ``close()`` drops the
    templates (useful on an external server; a local one is thrown away whole).
    """

    def __init__(self, server: PostgresCluster) -> None:
        self._server = server
        self._lock = threading.Lock()
        self._templates: dict[tuple[str, ...], str] = {}

    def template_for(self, sql_files: Sequence[str | os.PathLike[str]] = ()) -> str | None:
        if not sql_files:
            return None
        import hashlib

        key = tuple(hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in sql_files)
        with self._lock:
            name = self._templates.get(key)
            if name is None:
                name = unique_database_name("tickwork_tpl")
                self.build(name, sql_files)
                self._templates[key] = name
            return name

    def build(self, name: str, sql_files: Sequence[str | os.PathLike[str]]) -> None:
        from psycopg import sql

        dsn = self._server.create_database(name)
        try:
            apply_sql_files(dsn, sql_files)
        except BaseException:
            self._server.drop_database(name)
            raise
        self._server.execute_admin(
            sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(
                sql.Identifier(name)))

    def close(self) -> None:
        with self._lock:
            names = list(self._templates.values())
            self._templates.clear()
        for name in names:
            with contextlib.suppress(Exception):
                self._server.drop_database(name)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--watchdog":
        _watchdog_main(sys.argv[2], sys.argv[3])
    else:
        # python tests/support/pg/server.py: a server for manual use until Ctrl-C or SIGTERM.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with PostgresServer.start() as _server:
            print(f"{_server!r} up in {_server.started_in:.2f}s; dsn: {_server.dsn()}",
                  flush=True)
            print("Ctrl-C to stop", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
