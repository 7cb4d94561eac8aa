"""The HA shape of the local cluster (``cluster up --replicas N``): find the leading
kube-scheduler, kill its pair, start it again.

Each replica is a kube-scheduler and the railyard extender its config points at
(``config.Replica``; ``cluster.json`` lists them under ``replicas``). The Lease's
``holderIdentity`` is ``<hostname>_<uuid>`` for every process on this machine, so the leader is
told apart by its own ``/metrics``: kube-scheduler exports ``leader_election_master_status``
(1 on the leader, 0 on a standby) from client-go's leader election.
"""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from extender.localcluster import processes
from extender.localcluster.apiclient import http_ok, wait_healthy
from extender.localcluster.errors import ClusterError

MASTER_STATUS = re.compile(r"^leader_election_master_status\{[^}]*\}\s+([0-9.eE+-]+)\s*$", re.M)


def replicas(workdir: Path) -> list[dict[str, Any]]:
    """The replicas ``cluster.json`` records (index, scheduler and extender names, URLs)."""
    try:
        state = json.loads((Path(workdir) / "cluster.json").read_text())
    except (OSError, ValueError):
        raise ClusterError(f"no running cluster in {workdir} (cluster.json missing)") from None
    found = state.get("replicas") or []
    if not found:
        raise ClusterError(f"the cluster in {workdir} records no replicas (started by an older railyard)")
    return found


def replica(workdir: Path, index: int) -> dict[str, Any]:
    for r in replicas(workdir):
        if r["index"] == index:
            return r
    raise ClusterError(f"the cluster in {workdir} has no replica {index} "
                       f"(replicas {', '.join(str(r['index']) for r in replicas(workdir))})")


def leader_status(scheduler_url: str) -> bool | None:
    """True / False from the scheduler's ``leader_election_master_status``; None when it does
    not answer or exports no such metric (leader election off)."""
    context = ssl.create_default_context()
    context.check_hostname = False  # kube-scheduler serves a self-signed cert it made in memory
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(scheduler_url + "/metrics", timeout=3, context=context) as response:
            text = response.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError):
        return None
    values = [float(v) for v in MASTER_STATUS.findall(text)]
    return None if not values else max(values) == 1.0


def leader(workdir: Path, timeout: float = 60.0) -> dict[str, Any]:
    """The replica whose kube-scheduler leads, once exactly one alive one says it does."""
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while True:
        alive = [r for r in replicas(workdir) if _alive(workdir, r["scheduler"])]
        status = {r["index"]: leader_status(r["schedulerUrl"]) for r in alive}
        leading = [r for r in alive if status[r["index"]]]
        if len(leading) == 1:
            return leading[0]
        seen = [f"{r['scheduler']}={status[r['index']]}" for r in alive]
        if time.monotonic() > deadline:
            raise ClusterError(f"no single leading kube-scheduler after {timeout:.0f}s "
                               f"(leader_election_master_status: {', '.join(seen) or 'no scheduler alive'})")
        time.sleep(0.2)


def kill(workdir: Path, index: int, components: tuple[str, ...] = ("scheduler", "extender")) -> list[str]:
    """SIGKILL the replica's processes (``scheduler``, ``extender`` or both) and wait until they
    are gone; their pid files stay, so ``restart`` and ``down`` find them. Returns their names."""
    r = replica(workdir, index)
    names = [r[c] for c in components]
    recorded = {p.name: p for p in processes.recorded(workdir)}
    for name in names:
        proc = recorded.get(name)
        if proc is not None and processes.is_alive(proc):
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # each leads its own session: group id == pid
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    while any(_alive(workdir, n) for n in names):
        if time.monotonic() > deadline:
            raise ClusterError(f"{', '.join(names)} still alive 10s after SIGKILL")
        time.sleep(0.05)
    return names


def restart(workdir: Path, index: int, components: tuple[str, ...] = ("extender", "scheduler"),
            timeout: float = 180.0) -> list[int]:
    """Stop the replica's processes if they run and start them again with their recorded command
    lines (extender first, as ``up`` does; same ports, so the schedulers' configs still point at
    them), wait until each answers /readyz; return their pids. For crash tests (``kill -9``, then
    this) and for trying a changed extender on a running cluster; each previous log is kept as
    ``logs/<name>.log.1``."""
    r = replica(workdir, index)
    if "extender" in components and not r.get("extenderUrl"):
        raise ClusterError(f"the cluster in {workdir} runs without the extender (--no-extender)")
    pids = []
    for component in components:
        url = r["extenderUrl"].rsplit("/scheduler", 1)[0] if component == "extender" else r["schedulerUrl"]
        try:
            proc = processes.restart(workdir, r[component], processes.clean_env())
        except FileNotFoundError as exc:
            raise ClusterError(str(exc)) from None
        wait_healthy(workdir, proc, lambda: http_ok(url + "/readyz", insecure=True), timeout)
        pids.append(proc.pid)
    return pids


def _alive(workdir: Path, name: str) -> bool:
    return any(p.name == name and processes.is_alive(p) for p in processes.recorded(workdir))
