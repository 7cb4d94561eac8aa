"""Start and stop by PID, with real (harmless) processes: `sleep` stands in for a component."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from extender.localcluster import apiclient, processes
from extender.localcluster.errors import ClusterError


def test_start_records_pid_and_stop_ends_it(tmp_path):
    proc = processes.start(tmp_path, "sleeper", ["sleep", "60"])
    assert (tmp_path / "pids" / "sleeper.pid").read_text().split()[0] == str(proc.pid)
    assert processes.recorded(tmp_path) == [proc]
    assert processes.is_alive(proc)
    processes.stop(tmp_path, proc)
    assert not processes.is_alive(proc)
    assert processes.recorded(tmp_path) == []


def test_a_process_ignoring_sigterm_is_killed(tmp_path):
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    proc = processes.start(tmp_path, "stubborn", [sys.executable, "-c", script])
    while "up" not in processes.log_path(tmp_path, "stubborn").read_text():
        pass
    processes.stop(tmp_path, proc, grace_seconds=0.5)
    assert not processes.is_alive(proc)


def test_a_reused_pid_is_not_ours(tmp_path):
    proc = processes.start(tmp_path, "sleeper", ["sleep", "60"])
    impostor = processes.Running(name="sleeper", pid=proc.pid, start_time="1")
    assert not processes.is_alive(impostor)
    processes.stop(tmp_path, impostor)  # must not signal the real process
    assert processes.is_alive(proc)
    os.kill(proc.pid, signal.SIGKILL)
    os.waitpid(proc.pid, 0)


def test_restart_after_kill_runs_the_same_command_line_and_keeps_the_old_log(tmp_path):
    script = "import sys, time; print('started', sys.argv[1], flush=True); time.sleep(60)"
    first = processes.start(tmp_path, "crashy", [sys.executable, "-c", script, "arg"])
    while "started" not in processes.log_path(tmp_path, "crashy").read_text():
        pass
    os.kill(first.pid, signal.SIGKILL)
    os.waitpid(first.pid, 0)
    second = processes.restart(tmp_path, "crashy")
    assert second.pid != first.pid and processes.recorded(tmp_path) == [second]
    while "started arg" not in processes.log_path(tmp_path, "crashy").read_text():
        pass
    assert (tmp_path / "logs" / "crashy.log.1").read_text() == "started arg\n"
    processes.stop(tmp_path, second)


def test_children_get_no_proxy_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:1")
    monkeypatch.setenv("https_proxy", "http://proxy.invalid:1")
    proc = processes.start(tmp_path, "env", ["env"])
    while processes.is_alive(proc):
        pass
    assert "proxy.invalid" not in processes.log_path(tmp_path, "env").read_text()


def test_port_in_use_is_detected():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert processes.port_in_use(port)
    assert not processes.port_in_use(processes.free_port())


def test_python_processes_the_cluster_starts_import_this_railyard(tmp_path, monkeypatch):
    """The extender runs in the workdir: without this, ``python -m extender`` there imports the
    railyard the interpreter has installed, which may be another checkout."""
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = processes.clean_env()
    assert env["PYTHONPATH"].split(os.pathsep) == [processes.SOURCE_ROOT, "/elsewhere"]
    out = subprocess.run([sys.executable, "-c", "import extender; print(extender.__file__)"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(Path(processes.SOURCE_ROOT) / "extender" / "__init__.py")


# A stand-in for kwok: dies of the given message on its first ``dies`` starts, then comes up.
FLAKY = """
import pathlib, sys, time
runs = pathlib.Path("runs"); n = int(runs.read_text()) + 1 if runs.exists() else 1; runs.write_text(str(n))
if n <= int(sys.argv[1]):
    print(sys.argv[2], flush=True); sys.exit(2)
pathlib.Path("up").write_text("ok"); time.sleep(60)
"""


def flaky_start(tmp_path, dies: int, message: str, starts: int = 3):
    said: list[str] = []
    proc = processes.start(tmp_path, "kwok", [sys.executable, "-c", FLAKY, str(dies), message])
    try:
        return apiclient.wait_healthy_or_restart(tmp_path, proc, (tmp_path / "up").exists, 10, RACE, said.append,
                                                 starts=starts), said
    finally:
        for p in processes.recorded(tmp_path):
            processes.stop(tmp_path, p)


RACE = "fatal error: concurrent map writes"


def test_a_component_that_dies_of_its_known_startup_race_is_started_again(tmp_path):
    proc, said = flaky_start(tmp_path, 2, RACE)
    assert (tmp_path / "runs").read_text() == "3" and said == [
        f"kwok died of its known startup race ({RACE}); starting it again (2/3)",
        f"kwok died of its known startup race ({RACE}); starting it again (3/3)"]
    assert RACE in (tmp_path / "logs" / "kwok.log.1").read_text()  # the dead start's log is kept


def test_any_other_death_or_the_race_every_time_fails_with_the_log(tmp_path):
    with pytest.raises(ClusterError, match="(?s)kwok exited during startup.*panic: something else"):
        flaky_start(tmp_path, 1, "panic: something else")
    assert (tmp_path / "runs").read_text() == "1"  # not started again
    (tmp_path / "runs").unlink()
    with pytest.raises(ClusterError, match="concurrent map writes"):
        flaky_start(tmp_path, 5, RACE, starts=2)
    assert (tmp_path / "runs").read_text() == "2"
