"""A seeded stream of jobs: gangs and single pods with arrival times, sizes, runtimes.

The same stream (same seed, same topology) is submitted to every arm. Job fields say what a
user asks for; ``arms`` turns them into the objects each scheduler understands.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from bench.harness.scenario import HOSTNAME, LEVEL_KEYS

#: Request levels, narrowest first (the words of scenario files).
REQUEST_LEVELS = ("nvl", "leaf", "block")


@dataclass(frozen=True)
class Job:
    name: str
    kind: str
    """``gang`` or ``single``."""
    pods: int
    gpus: int
    """GPUs per pod."""
    at: float
    """Arrival, seconds after the arm's start."""
    runtime_s: float | None
    """Simulated runtime of each pod once Running (kwok); None = runs until the arm ends."""
    required: str | None = None
    """Level word (``nvl``, ``leaf``, ``block``) every member must share, or None."""
    preferred: str | None = None
    priority_class: str | None = None
    """A PriorityClass of the scenario's ``priority_classes`` the pods name, or None."""


def largest_domain_pods(nodes: list[dict[str, Any]], level: str, gpus: int) -> int:
    """Pods of ``gpus`` GPUs the largest empty domain at ``level`` holds (``cluster`` = all)."""
    per_domain: dict[tuple[str, ...], int] = {}
    keys = [LEVEL_KEYS[w] for w in ("block", "leaf", "nvl")]
    depth = {"cluster": 0, "block": 1, "leaf": 2, "nvl": 3, "host": 4}[level]
    for node in nodes:
        labels = node["metadata"]["labels"]
        path = tuple(labels.get(k, "") for k in keys)[:depth] if depth < 4 else (labels[HOSTNAME],)
        cap = int(node["status"]["allocatable"]["nvidia.com/gpu"])
        per_domain[path] = per_domain.get(path, 0) + cap // gpus
    return max(per_domain.values())


def generate(workload: dict[str, Any], nodes: list[dict[str, Any]], seed: int) -> list[Job]:
    """Every job of the scenario's workload, sorted by arrival time."""
    rng = random.Random(seed)
    total_gpus = sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes)
    jobs: list[Job] = []
    for i, fixed in enumerate(workload.get("fixed") or []):
        gpus = int(fixed["gpus"])
        pods = int(fixed.get("pods") or math.ceil(float(fixed["cluster_fraction"]) * total_gpus / gpus))
        jobs.append(Job(fixed.get("name", f"fixed-{i}"), "gang", pods, gpus, float(fixed.get("at_s", 0)),
                        _opt(fixed.get("runtime_s")), fixed.get("required"), fixed.get("preferred"),
                        fixed.get("priority_class")))
    for s, stream in enumerate(workload.get("gangs") or []):
        jobs.extend(_gang_stream(stream, s, nodes, rng))
    singles = workload.get("singles")
    if singles:
        sizes = _weights(singles["gpus"])
        start, window = float(singles.get("start_s", 0)), float(singles.get("window_s", 0))
        for i in range(int(singles["count"])):
            at = start + (rng.random() * window if window else 0.0)
            jobs.append(Job(f"s{i}", "single", 1, _pick(rng, sizes), at, _runtime(rng, singles.get("runtime_s")),
                            priority_class=singles.get("priority_class")))
    jobs.sort(key=lambda j: (j.at, j.kind != "gang"))
    return jobs


def _gang_stream(stream: dict[str, Any], index: int, nodes: list[dict[str, Any]], rng: random.Random) -> list[Job]:
    sizes, per_pod = _weights(stream["sizes"]), _weights(stream["gpus_per_pod"])
    requests = _weights(stream.get("topology") or {"none": 1})
    start, window = float(stream.get("start_s", 0)), float(stream.get("window_s", 0))
    prefix = stream.get("prefix", f"g{index}-")
    fits = {(lvl, g): largest_domain_pods(nodes, lvl, g)
            for g in per_pod[0] for lvl in (*REQUEST_LEVELS, "cluster")}
    jobs = []
    for i in range(int(stream["count"])):
        gpus = _pick(rng, per_pod)
        # Sizes larger than one block cannot be asked for honestly here: draw again.
        size = _pick(rng, sizes)
        while size > fits[("block", gpus)]:
            size = _pick(rng, sizes)
        request = _pick(rng, requests)
        level = next(lvl for lvl in REQUEST_LEVELS if size <= fits[(lvl, gpus)])
        at = start + (rng.random() * window if window else 0.0)
        jobs.append(Job(f"{prefix}{i}", "gang", size, gpus, at, _runtime(rng, stream.get("runtime_s")),
                        required=level if request == "required" else None,
                        preferred=level if request == "preferred" else None,
                        priority_class=stream.get("priority_class")))
    return jobs


def _weights(mapping: dict[Any, float]) -> tuple[list[Any], list[float]]:
    items = list(mapping.items())
    keys = [int(k) if str(k).isdigit() else k for k, _ in items]
    return keys, [float(w) for _, w in items]


def _pick(rng: random.Random, weights: tuple[list[Any], list[float]]) -> Any:
    return rng.choices(weights[0], weights=weights[1])[0]


def _runtime(rng: random.Random, spec: Any) -> float | None:
    if spec is None:
        return None
    if isinstance(spec, (int, float)):
        return float(spec)
    lo, hi = (float(x) for x in spec)
    return round(rng.uniform(lo, hi), 1)


def _opt(value: Any) -> float | None:
    return None if value is None else float(value)
