"""CPU seconds of the cluster's processes, read from ``/proc`` (issue 13: "measure the parts").

A throughput gap between two arms says nothing about *which* process spent the time. Each
process's ``utime + stime`` (fields 14 and 15 of ``/proc/<pid>/stat``, every thread included)
is sampled at the edges of the measured window, so a run can say how many CPU milliseconds
kube-scheduler, the API server, etcd, kwok and railyard each spent per scheduled pod. The
whole machine's busy time (``/proc/stat``) is sampled with them: on a shared machine the part
no process of ours spent (``other``) says how much the neighbours took.

Context switches (issue 21) come from ``voluntary_ctxt_switches`` and
``nonvoluntary_ctxt_switches`` of ``/proc/<pid>/status``. That file counts only the process's
main thread (the kernel prints the leader task's ``nvcsw``/``nivcsw``), so ``switches`` reads
``/proc/<pid>/task/<tid>/status`` for every thread and ``switched`` subtracts thread by thread:
a thread born in the window counts whole, one that exited in it is lost (an undercount).

The parsers are pure (text in, numbers out) so tests feed them fixed text; ``sample`` and
``switches`` are the only functions that read files.
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


def processes(per_key: dict[str, float]) -> float:
    """What the sampled processes spent together (the cluster's and this harness's): every key
    but ``machine`` and ``other``. Divided per pod, the neighbours' load on a shared machine is
    not in it (issue 21's process-only ratio)."""
    return sum(v for k, v in per_key.items() if k not in (MACHINE, OTHER))


def parse_switches(text: str) -> tuple[int, int]:
    """(voluntary, involuntary) context switches from one ``/proc/<pid>/task/<tid>/status``."""
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            found[key] = int(value)
    return found["voluntary_ctxt_switches"], found["nonvoluntary_ctxt_switches"]


def switches(pids: dict[str, int], proc: Path = Path("/proc")) -> dict[str, dict[str, list[int]]]:
    """Per process (results.json key, this harness included), per thread id, its
    ``[voluntary, involuntary]`` context switches so far. Gone processes and threads are left out."""
    out: dict[str, dict[str, list[int]]] = {}
    for name, pid in sorted({**pids, HARNESS: os.getpid()}.items()):
        try:
            tids = sorted((proc / str(pid) / "task").iterdir())
        except OSError:
            continue
        threads = {}
        for tid in tids:
            try:
                threads[tid.name] = list(parse_switches((tid / "status").read_text()))
            except (OSError, KeyError, ValueError):
                continue
        out[COMPONENT_KEYS.get(name, name)] = threads
    return out


def switched(before: dict[str, dict[str, list[int]]], after: dict[str, dict[str, list[int]]]) -> dict[str, dict[str, int]]:
    """Context switches per process between two ``switches`` samples, ``{"voluntary": n,
    "involuntary": n}``, thread by thread (a thread new in ``after`` counts from 0)."""
    out = {}
    for name, threads in after.items():
        if name not in before:
            continue
        old = before[name]
        vol = sum(v - old.get(tid, [0, 0])[0] for tid, (v, _) in threads.items())
        inv = sum(n - old.get(tid, [0, 0])[1] for tid, (_, n) in threads.items())
        out[name] = {"voluntary": vol, "involuntary": inv}
    return out


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each key spent between two samples, plus ``other``: the machine's busy time
    that none of the sampled processes spent (neighbours on a shared machine; can dip a little
    below 0 from sampling skew between the files)."""
    out = {k: after[k] - before[k] for k in after if k in before}
    if MACHINE in out:
        out[OTHER] = out[MACHINE] - sum(v for k, v in out.items() if k != MACHINE)
    return out
