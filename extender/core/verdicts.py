"""Results the core hands to adapters, and the sentences operators read.

A placement "no" is not an exception: it is a verdict with numbers, shown by
``kubectl describe pod`` (FailedNodes), in Events, in ``railyard plan`` and ``ExplainPod``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from extender.core.planner import NoPlacement, Placement
from extender.core.topology import Topology, format_path


@dataclass(frozen=True)
class FilterVerdict:
    """The answer to one filter call: nodes that pass and why the others do not."""

    node_names: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=dict)
    """Unschedulable: preemption or time may help."""
    failed_unresolvable: Mapping[str, str] = field(default_factory=dict)
    """UnschedulableAndUnresolvable: preemption cannot help."""


def describe_demand(demand: tuple[int, ...]) -> str:
    """``16 pods x 8 GPUs`` or ``4 pods x 8 GPUs + 1 pod x 0 GPUs``."""
    counts: dict[int, int] = {}
    for s in demand:
        counts[s] = counts.get(s, 0) + 1
    parts = [f"{n} pod{'s' if n != 1 else ''} x {s} GPU{'s' if s != 1 else ''}"
             for s, n in sorted(counts.items(), reverse=True)]
    return " + ".join(parts) or "0 pods"


def level_word(topo: Topology, lvl: int) -> str:
    """A short word for a level in sentences: its name, else the last part of its key."""
    if lvl < 0:
        return "cluster"
    if lvl == topo.depth:
        return "node"
    level = topo.levels[lvl]
    return level.name or level.key.rsplit("/", 1)[-1]


def explain_no_placement(topo: Topology, np: NoPlacement) -> str:
    if np.invalid:
        return f"gang {np.gang}: " + "; ".join(np.invalid)
    need = f"gang {np.gang} needs {describe_demand(np.demand)}"
    if np.bound_level >= 0:
        need += f" within one {topo.level_key(np.bound_level)}"
    if np.best is None:
        return f"{need}; the cluster has no nodes"
    b = np.blockers
    why = []
    if b.cordoned:
        why.append(f"{b.cordoned} node{'s' if b.cordoned != 1 else ''} cordoned")
    if b.not_ready:
        why.append(f"{b.not_ready} node{'s' if b.not_ready != 1 else ''} not ready")
    if b.tainted:
        why.append(f"{b.tainted} node{'s' if b.tainted != 1 else ''} tainted")
    if b.reserved_gpus:
        why.append(f"{b.reserved_gpus} GPUs reserved for other gangs")
    if b.used_gpus:
        why.append(f"{b.used_gpus} GPUs in use")
    where = (f"best {level_word(topo, np.bound_level)} {format_path(np.best.path)}"
             if np.bound_level >= 0 else "the cluster")
    text = f"{need}; {where} fits {np.fits}"
    return text + (f" ({', '.join(why)})" if why else "")


def explain_placement(topo: Topology, p: Placement) -> str:
    gpus = sum(s.gpus for s in p.slots)
    nodes = len({s.node for s in p.slots})
    if p.level < 0:
        where = "across the cluster (no shared domain)"
    else:
        where = f"within {topo.level_key(p.level)} {format_path(p.domain.path)}"
    pods = len(p.slots)
    text = f"gang {p.gang}: {pods} pod{'s' if pods != 1 else ''}, {gpus} GPUs on {nodes} node{'s' if nodes != 1 else ''} {where}"
    if not p.preferred_met:
        text += "; preferred level not available, placed wider"
    return text
