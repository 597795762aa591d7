"""``tickwork serve`` across processes: kill -9 and recovery, the data-dir lock,
graceful shutdown, the printed token, and ``--executors`` forms."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.serve import ROOT, Serve, job
from tickwork.__main__ import COMMANDS, main
from tickwork.hosts.cpython.owners import owner_file_name


def settled_rows(data: Path, owner: str, job_id: str) -> list[tuple[str, str | None]]:
    """The job's rows as stored: exactly one, and settled, when all went well."""
    connection = sqlite3.connect(data / "owners" / owner_file_name(owner))
    try:
        rows = connection.execute(
            "SELECT state, outcome FROM tickwork_jobs WHERE job_id = ?", (job_id,)).fetchall()
    finally:
        connection.close()
    return [(str(state), outcome) for state, outcome in rows]


def test_kill_9_mid_job_then_restart_recovers_with_one_outcome(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = Serve(data).start()
    client = serve.client()
    try:
        client.enqueue("crash-a", job("again", "block_once", recovery={"max_recoveries": 1},
                                      payload={"marker": str(tmp_path / "marker-a")}))
        client.enqueue("crash-b", job("once", "block_once",
                                      payload={"marker": str(tmp_path / "marker-b")}))
        client.running("crash-a", "again")
        client.running("crash-b", "once")
    finally:
        serve.kill()  # SIGKILL: no Python code runs, the claims stay "running"
    assert (tmp_path / "marker-a").exists() and (tmp_path / "marker-b").exists()
    assert settled_rows(data, "crash-a", "again") == [("running", None)]

    serve.start()  # same data directory: the start-up scan finds both owners
    try:
        client = serve.client()
        again = client.settled("crash-a", "again")
        once = client.settled("crash-b", "once")
        assert (again["outcome"], again["recoveries"]) == ("completed", 1)  # ran again
        assert (once["outcome"], once["recoveries"]) == ("interrupted", 0)  # no budget
        assert "2 owner(s) with pending work" in serve.stdout()
    finally:
        assert serve.stop() == 0
    assert settled_rows(data, "crash-a", "again") == [("settled", "completed")]
    assert settled_rows(data, "crash-b", "once") == [("settled", "interrupted")]


def test_a_second_serve_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = Serve(data).start()
    try:
        second = Serve(data, logs=tmp_path / "second")
        try:
            second.start()
        except RuntimeError as error:
            assert "in use by pid" in str(error)
            assert str(first.process.pid if first.process else "") in str(error)
        else:
            second.stop()
            raise AssertionError("the second serve started")
        assert second.process is not None and second.process.returncode == 1
        first.client().enqueue("still-mine", job("x"))
        assert first.client().settled("still-mine", "x")["outcome"] == "completed"
    finally:
        first.stop()
    # Once the first is gone, the directory can be served again.
    again = Serve(data, logs=tmp_path / "third").start()
    try:
        assert again.client().job("still-mine", "x")["outcome"] == "completed"
    finally:
        again.stop()


def test_graceful_shutdown_lets_a_job_settle_or_interrupts_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = Serve(data, "--grace", "1.5").start()
    client = serve.client()
    client.enqueue("short", job("short", "slow", payload={"ms": 300}))
    client.enqueue("stuck", job("stuck", "slow"))  # only an abort ends it
    client.running("short", "short")
    client.running("stuck", "stuck")
    assert serve.stop(signal.SIGTERM) == 0
    assert "SIGTERM: stopping" in serve.stderr()
    assert settled_rows(data, "short", "short") == [("settled", "completed")]
    assert settled_rows(data, "stuck", "stuck") == [("settled", "failed")]
    serve.start()
    try:
        stuck = serve.client().job("stuck", "stuck")
        assert stuck is not None and stuck["failure_reason"] == "execution_interrupted"
    finally:
        serve.stop(signal.SIGINT)


def test_a_generated_token_is_printed_once_and_env_token_is_used(tmp_path: Path) -> None:
    generated = Serve(tmp_path / "gen", token=None).start()
    try:
        line = next(line for line in generated.stdout().splitlines() if "token (generated" in line)
        token = line.rsplit(" ", 1)[1]
        assert generated.stdout().count(token) == 1
        assert generated.client(token=token).enqueue("t", job("a"))[0] == 201
        assert generated.client().enqueue("t", job("b"))[0] == 401
    finally:
        generated.stop()
    from_env = Serve(tmp_path / "env", token=None, env={"TICKWORK_TOKEN": "from-env"}).start()
    try:
        assert "token (generated" not in from_env.stdout()
        assert from_env.client(token="from-env").enqueue("t", job("a"))[0] == 201
    finally:
        from_env.stop()


def test_executors_factory_and_default_registry(tmp_path: Path) -> None:
    factory = Serve(tmp_path / "factory",
                    executors="tests.support.serve_executors:make_registry").start()
    try:
        factory.client().enqueue("f", job("a", "fail"))
        assert factory.client().settled("f", "a")["failure_reason"] == "boom"
    finally:
        factory.stop()
    default = Serve(tmp_path / "default", executors=None).start()
    try:
        client = default.client()
        client.enqueue("d", job("echo", "echo"), job("nap", "sleep", queue="q2",
                                                     payload={"ms": 10}),
                       job("long", "long", queue="q3", payload={"steps": 2, "step_ms": 5}),
                       job("hook", "webhook", queue="q4",
                           payload={"url": "http://127.0.0.1:1/", "body": {}}))
        assert [client.settled("d", name)["outcome"] for name in ("echo", "nap", "long")] == [
            "completed"] * 3
        hook = client.settled("d", "hook")
        # The default webhook transport sends to public addresses only.
        assert (hook["outcome"], hook["failure_reason"]) == ("failed", "destination_refused")
    finally:
        default.stop()


def test_bad_executors_spec_fails_clearly(tmp_path: Path) -> None:
    for spec, message in (("nocolon", "expected MODULE:ATTR"),
                          ("no_such_module_xyz:registry", "cannot import"),
                          ("tests.support.serve_executors:missing", "has no missing")):
        result = subprocess.run(
            [sys.executable, "-m", "tickwork", "serve", "--data", str(tmp_path / "d"),
             "--port", "0", "--executors", spec], cwd=ROOT, capture_output=True, text=True,
            timeout=30)
        assert result.returncode == 1
        assert message in result.stderr, result.stderr


def test_help_lists_the_commands() -> None:
    result = subprocess.run([sys.executable, "-m", "tickwork", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    for command in ("demo", "serve", "inspect"):
        assert command in result.stdout
    serve_help = subprocess.run([sys.executable, "-m", "tickwork", "serve", "--help"],
                                cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert "--executors" in serve_help.stdout and "--postgres" in serve_help.stdout
    for command in ("serve", "inspect"):
        shown = subprocess.run([sys.executable, "-m", "tickwork", command, "--help"],
                               cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert shown.returncode == 0 and "``" not in shown.stdout, shown.stdout  # no reST


def test_version_is_printed() -> None:
    import tickwork

    result = subprocess.run([sys.executable, "-m", "tickwork", "--version"], cwd=ROOT,
                            capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stdout) == (0, f"tickwork {tickwork.__version__}\n")


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_demo_help_prints_the_demos_usage_and_does_not_run_it(
        flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", flag])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tickwork demo")
    assert COMMANDS["demo"] in out
    assert "tickwork demo:" not in out  # the demo's first line: it never ran
    result = subprocess.run([sys.executable, "-m", "tickwork", "demo", flag], cwd=ROOT,
                            capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stdout) == (0, out)
