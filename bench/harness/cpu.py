"""CPU seconds of the cluster's processes, read from ``/proc`` (issue 13: "measure the parts").

A throughput gap between two arms says nothing about *which* process spent the time. Each
process's ``utime + stime`` (fields 14 and 15 of ``/proc/<pid>/stat``, every thread included)
is sampled at the edges of the measured window, so a run can say how many CPU milliseconds
kube-scheduler, the API server, etcd, kwok and railyard each spent per scheduled pod. The
whole machine's busy time (``/proc/stat``) is sampled with them: on a shared machine the part
no process of ours spent (``other``) says how much the neighbours took.

The parsers are pure (text in, seconds out) so tests feed them fixed text; ``sample`` is the
only function that reads files.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Clock ticks per second of the ``/proc`` counters (100 on Linux x86).
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

#: Names in results.json for the processes ``cluster up`` records (pid file name -> key).
COMPONENT_KEYS = {"extender": "railyard"}
#: Keys that are not one process: this harness (``harness``, the watch and creation threads),
#: all cores' busy time (``machine``) and what neither our processes nor the harness spent.
HARNESS, MACHINE, OTHER = "harness", "machine", "other"


def parse_pid_stat(text: str, clk_tck: int = CLK_TCK) -> float:
    """``utime + stime`` in seconds from one ``/proc/<pid>/stat`` line.

    The command name (field 2) is in parentheses and may hold spaces or ``)``, so the fields
    are counted from the last ``)``: what follows starts at field 3 (state).
    """
    fields = text.rsplit(")", 1)[1].split()
    utime, stime = int(fields[14 - 3]), int(fields[15 - 3])
    return (utime + stime) / clk_tck


def parse_machine_stat(text: str, clk_tck: int = CLK_TCK) -> float:
    """Busy CPU seconds of all cores from ``/proc/stat``'s ``cpu`` line.

    Busy = user + nice + system + irq + softirq + steal; idle and iowait are not work.
    (guest time is already inside user.)
    """
    line = next(ln for ln in text.splitlines() if ln.startswith("cpu "))
    values = [int(v) for v in line.split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / clk_tck


def sample(pids: dict[str, int], proc: Path = Path("/proc")) -> dict[str, float]:
    """CPU seconds so far of each process in ``pids`` (by results.json key), the harness and
    the machine. A process that is gone (or a ``/proc`` that cannot be read) is left out."""
    out: dict[str, float] = {}
    for name, pid in sorted(pids.items()):
        try:
            out[COMPONENT_KEYS.get(name, name)] = parse_pid_stat((proc / str(pid) / "stat").read_text())
        except (OSError, IndexError, ValueError):
            continue
    try:
        out[HARNESS] = parse_pid_stat((proc / str(os.getpid()) / "stat").read_text())
        out[MACHINE] = parse_machine_stat((proc / "stat").read_text())
    except (OSError, IndexError, ValueError, StopIteration):
        pass
    return out


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each key spent between two samples, plus ``other``: the machine's busy time
    that none of the sampled processes spent (neighbours on a shared machine; can dip a little
    below 0 from sampling skew between the files)."""
    out = {k: after[k] - before[k] for k in after if k in before}
    if MACHINE in out:
        out[OTHER] = out[MACHINE] - sum(v for k, v in out.items() if k != MACHINE)
    return out
