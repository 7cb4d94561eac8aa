"""Policy for pods that name no gang, and scores: nothing reserved, and no work per node name
where railyard has nothing to add (issue 13: at 5,000 nodes a loop over every name cost more
than kube-scheduler's own cycle).

- filter: kube-scheduler sends only the nodes that passed its own filters (GPU fit, counting the
  pods it has assumed, which railyard's watch sees later), so railyard looks only at the nodes
  it knows more about: those holding GPUs reserved for gangs (fail when the pod's GPUs are not
  free after the reservation) and those it sees cordoned or not ready. Every other name passes,
  as does a node railyard has not cached yet.
- prioritize: best fit, 0..10 in steps of the node's GPU count (fewer GPUs left free scores
  higher), so single pods pack and large free nodes stay whole for gangs. kube-scheduler adds
  Score x weight x 10 to each host listed and nothing to the others, so every score is lowered
  by the lowest one and hosts left at 0 are not listed: the same choice, a reply only as long as
  the hosts that differ (none on a cluster of identical empty nodes). A member with a planned
  slot lists only its node.
"""

from __future__ import annotations

from typing import Sequence

from extender.core import verdicts
from extender.core.state import View
from extender.core.verdicts import FilterVerdict

MAX_SCORE = 10


def filter_single(view: View, gpus: int, names: Sequence[str]) -> FilterVerdict:
    topology, blocked, free, reserved = view.topology, view.blocked, view.free, view.reserved
    suspects = [topology.names[i] for i in view.blocked_nodes]
    suspects += view.reserved_nodes
    if not suspects:
        return FilterVerdict(tuple(names))
    index = topology.index
    failed = {}
    for name in suspects:
        i = index.get(name)
        if i is None:
            continue
        if blocked[i] is not None:
            failed[name] = verdicts.node_blocked(blocked[i], gpus)
        elif free[i] < gpus:
            failed[name] = verdicts.too_few_gpus(free[i], reserved[i], gpus)
    if not failed:
        return FilterVerdict(tuple(names))
    asked = set(names)
    failed = {name: why for name, why in failed.items() if name in asked}
    return FilterVerdict(tuple(n for n in names if n not in failed), failed)


def best_fit_scores(view: View, gpus: int, names: Sequence[str]) -> list[tuple[str, int]]:
    index, free, nodes = view.topology.index, view.free, view.topology.nodes
    get = index.get
    scores = []
    for name in names:
        i = get(name)
        total = nodes[i].gpus if i is not None else 0
        if not total:
            scores.append(0)
            continue
        leftover = min(max(free[i] - gpus, 0), total)
        scores.append(MAX_SCORE - MAX_SCORE * leftover // total)
    low = min(scores, default=0)
    return [(name, score - low) for name, score in zip(names, scores) if score > low]


def planned_scores(node: str, names: Sequence[str]) -> list[tuple[str, int]]:
    return [(node, MAX_SCORE)] if node in names else []
