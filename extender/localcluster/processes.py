"""Start and stop the cluster's processes by PID, so ``cluster down`` works from any shell.

Each process gets ``<workdir>/pids/<name>.pid`` holding its PID and its kernel start time
(field 22 of ``/proc/<pid>/stat``): a PID alone can be reused by an unrelated process after a
reboot or a long time, the pair cannot. Each process leads its own session (so a Ctrl-C in
the terminal that ran ``cluster up`` does not reach it, and stopping it also reaches any child
it spawned) and logs to ``<workdir>/logs/<name>.log``.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

#: Proxy variables are dropped from every child: everything talks to 127.0.0.1, and
#: kube-scheduler's extender client (Go's http.ProxyFromEnvironment) would send the extender
#: calls through a proxy. NO_PROXY alone is not enough for all clients.
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@dataclass(frozen=True)
class Running:
    """A process this module started, as its pid file records it."""

    name: str
    pid: int
    start_time: str


def pid_dir(workdir: Path) -> Path:
    return Path(workdir) / "pids"


def log_path(workdir: Path, name: str) -> Path:
    return Path(workdir) / "logs" / f"{name}.log"


SOURCE_ROOT = str(Path(__file__).resolve().parents[2])
"""The directory holding the ``extender`` package this code was imported from."""


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without proxy settings, plus ``extra``. Python processes the
    cluster starts (the extender) import this railyard's own code (``SOURCE_ROOT`` first on
    ``PYTHONPATH``): they run in the workdir, where ``python -m extender`` would otherwise find
    whatever railyard the interpreter has installed, not the checkout that started them."""
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SOURCE_ROOT, env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def start(workdir: Path, name: str, argv: list[str], env: dict[str, str] | None = None) -> Running:
    """Start ``argv`` in the background, logging to logs/<name>.log; record its pid file."""
    log = log_path(workdir, name)
    log.parent.mkdir(parents=True, exist_ok=True)
    pid_dir(workdir).mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=clean_env() if env is None else env,
            cwd=workdir,
            start_new_session=True,
        )
    running = Running(name=name, pid=proc.pid, start_time=_start_time(proc.pid) or "")
    (pid_dir(workdir) / f"{name}.pid").write_text(f"{running.pid} {running.start_time}\n")
    argv_path(workdir, name).write_text(json.dumps(argv) + "\n")
    return running


def argv_path(workdir: Path, name: str) -> Path:
    """The command line ``start`` ran for ``name``, as JSON: ``restart`` runs it again."""
    return pid_dir(workdir) / f"{name}.argv.json"


def restart(workdir: Path, name: str, env: dict[str, str] | None = None) -> Running:
    """Stop ``name`` if it runs and start it again with the command line it was started with.

    The previous log is kept as ``logs/<name>.log.1`` (what a crash test wants to read).
    """
    try:
        argv = json.loads(argv_path(workdir, name).read_text())
    except (OSError, ValueError):
        raise FileNotFoundError(f"no recorded command line for {name} in {pid_dir(workdir)}") from None
    for proc in recorded(workdir):
        if proc.name == name:
            stop(workdir, proc)
    log = log_path(workdir, name)
    if log.exists():
        log.replace(log.with_name(log.name + ".1"))
    return start(workdir, name, argv, env)


def recorded(workdir: Path) -> list[Running]:
    """Every process with a pid file in ``workdir``, alive or not."""
    result: list[Running] = []
    directory = pid_dir(workdir)
    if not directory.is_dir():
        return result
    for path in sorted(directory.glob("*.pid")):
        fields = path.read_text().split()
        if not fields or not fields[0].isdigit():
            continue
        result.append(Running(name=path.stem, pid=int(fields[0]), start_time=fields[1] if len(fields) > 1 else ""))
    return result


def is_alive(proc: Running) -> bool:
    """True if the PID still names the process we started (not a zombie, not a reused PID)."""
    _reap(proc.pid)
    stat = _stat(proc.pid)
    if stat is None:
        return False
    state, start_time = stat
    if state == "Z":
        return False
    return not proc.start_time or start_time == proc.start_time


def stop(workdir: Path, proc: Running, grace_seconds: float = 10.0) -> None:
    """SIGTERM the process's group, wait up to ``grace_seconds``, then SIGKILL; drop its pid file."""
    if is_alive(proc):
        _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while is_alive(proc) and time.monotonic() < deadline:
            time.sleep(0.05)
        if is_alive(proc):
            _signal_group(proc.pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while is_alive(proc) and time.monotonic() < deadline:
                time.sleep(0.05)
        _wait_reaped(proc.pid)
    (pid_dir(workdir) / f"{proc.name}.pid").unlink(missing_ok=True)


def _wait_reaped(pid: int, seconds: float = 3.0) -> None:
    """Give init a moment to reap the exited process, so no <defunct> entry outlives ``down``."""
    deadline = time.monotonic() + seconds
    while _stat(pid) is not None and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.02)


def _signal_group(pid: int, sig: int) -> None:
    # Called only while is_alive() vouches for the leader. Our children lead their own
    # session, so their process group id equals their pid.
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our own child, so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) from /proc/<pid>/stat, or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], fields[19]


def _start_time(pid: int) -> str | None:
    stat = _stat(pid)
    return stat[1] if stat else None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True if binding ``host:port`` fails because something holds it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log, for error messages."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
