"""Policy for pods that name no gang, and scores: O(names) over the counters, nothing reserved.

- filter: a pod with a value railyard could not read passes no node (the reason on each);
  else a node passes when it has the pod's GPUs free after every gang's reservation and
  takes placements (not cordoned, not NotReady); a node railyard has not cached yet passes
  (kube-scheduler's own fit check decides).
- prioritize: best fit, 0..10 in steps of the node's GPU count (fewer GPUs left free scores
  higher), so single pods pack and large free nodes stay whole for gangs. A member with a
  planned slot scores 10 on its node and 0 elsewhere.
"""

from __future__ import annotations

from typing import Sequence

from extender.core import verdicts
from extender.core.state import View
from extender.core.verdicts import FilterVerdict

MAX_SCORE = 10


def filter_unreadable(pod: str, problems: tuple[str, ...], names: Sequence[str]) -> FilterVerdict:
    """A pod with values the translator could not read (GPUs among them: ``abc`` is not 0 GPUs)
    is placed nowhere, as a gang with a problem is: the reason on every node, unresolvable."""
    reason = verdicts.unreadable_pod(pod, problems)
    return FilterVerdict((), {}, {n: reason for n in names})


def filter_single(view: View, gpus: int, names: Sequence[str]) -> FilterVerdict:
    passed, failed = [], {}
    index, free, blocked, reserved = view.topology.index, view.free, view.blocked, view.reserved
    for name in names:
        i = index.get(name)
        if i is None:
            passed.append(name)
        elif blocked[i] is not None:
            failed[name] = verdicts.node_blocked(blocked[i], gpus)
        elif free[i] >= gpus:
            passed.append(name)
        else:
            failed[name] = verdicts.too_few_gpus(free[i], reserved[i], gpus)
    return FilterVerdict(tuple(passed), failed)


def best_fit_scores(view: View, gpus: int, names: Sequence[str]) -> list[tuple[str, int]]:
    index, free, nodes = view.topology.index, view.free, view.topology.nodes
    get = index.get
    scores = []
    for name in names:
        i = get(name)
        total = nodes[i].gpus if i is not None else 0
        if not total:
            scores.append((name, 0))
            continue
        leftover = min(max(free[i] - gpus, 0), total)
        scores.append((name, MAX_SCORE - MAX_SCORE * leftover // total))
    return scores


def planned_scores(node: str, names: Sequence[str]) -> list[tuple[str, int]]:
    return [(n, MAX_SCORE if n == node else 0) for n in names]
