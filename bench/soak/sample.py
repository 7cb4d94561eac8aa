"""One sample of the extender process: /proc (RSS, threads, descriptors) and its /metrics (Python
heap as allocated blocks, open connections, what the service holds, the verb histograms).

The parsers take text so tests feed them fixed input; ``read_proc`` and ``scrape`` are the only
functions that read anything.
"""

from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

#: Verbs of the reference configuration (no prioritize: docs/configuration.md).
VERBS = ("filter", "bind")


def parse_status(text: str) -> dict[str, float]:
    """RSS (MB) and threads from ``/proc/<pid>/status``."""
    rss = re.search(r"^VmRSS:\s+(\d+)\s+kB", text, re.M)
    threads = re.search(r"^Threads:\s+(\d+)", text, re.M)
    if rss is None or threads is None:
        raise ValueError("no VmRSS or Threads line in /proc/<pid>/status")
    return {"rss_mb": int(rss.group(1)) / 1024, "threads": int(threads.group(1))}


def read_proc(pid: int, proc: Path = Path("/proc")) -> dict[str, float]:
    """RSS, threads, open descriptors and how many of them are sockets; raises OSError when
    the process is gone."""
    out = parse_status((proc / str(pid) / "status").read_text())
    fds = os.listdir(proc / str(pid) / "fd")
    sockets = 0
    for fd in fds:
        try:
            sockets += os.readlink(proc / str(pid) / "fd" / fd).startswith("socket:")
        except OSError:
            continue
    out.update(fds=len(fds), socket_fds=sockets)
    return out


def parse_metrics(text: str) -> dict[str, Any]:
    """What the soak follows from railyard's exposition (docs/metrics.md):
    ``heap_kblocks`` (railyard_python_allocated_blocks / 1000), ``connections`` (total) and
    ``connections_by`` server, ``python_threads`` by thread name (``bind``: the held binds'
    pool), ``held_binds`` (bind calls held at the gang gate now), ``held`` by kind
    (railyard_held_objects), ``cache`` by kind, and ``buckets`` per verb: cumulative
    ``[[le, count], ...]`` summed over outcomes."""
    out: dict[str, Any] = {"connections_by": {}, "held": {}, "cache": {}, "buckets": {}, "python_threads": {}}
    buckets: dict[str, dict[float, float]] = {v: {} for v in VERBS}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "railyard_python_allocated_blocks":
                out["heap_kblocks"] = s.value / 1000
            elif s.name == "railyard_open_connections":
                out["connections_by"][s.labels["server"]] = s.value
            elif s.name == "railyard_python_threads":
                out["python_threads"][s.labels["thread"]] = s.value
            elif s.name == "railyard_held_binds":
                out["held_binds"] = s.value
            elif s.name == "railyard_held_objects":
                out["held"][s.labels["kind"]] = s.value
            elif s.name == "railyard_cache_objects":
                out["cache"][s.labels["kind"]] = s.value
            elif s.name == "railyard_verb_duration_seconds_bucket" and s.labels.get("verb") in buckets:
                le = float(s.labels["le"])
                acc = buckets[s.labels["verb"]]
                acc[le] = acc.get(le, 0.0) + s.value
    out["connections"] = sum(out["connections_by"].values())
    out["buckets"] = {v: sorted([le, c] for le, c in b.items()) for v, b in buckets.items() if b}
    return out


def scrape(port: int, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        return r.read().decode()
