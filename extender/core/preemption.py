"""Which of kube-scheduler's preemption candidates railyard lets stand.

A candidate node (with the victims the scheduler chose on it) is kept only if:

- no victim belongs to a gang of several pods unless every bound member of that gang is among
  this node's victims (never break a running gang), and
- after the victims leave, the node has the preemptor's GPUs free without touching GPUs
  reserved for other gangs (the preemptor's own planned slot on the node counts as free).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from extender.core.state import ClusterState, Slot


def vet_victims(state: ClusterState, gpus: int, own_slot: Slot | None,
                victims: Mapping[str, Sequence[str]], gang_of: Callable[[str], str | None],
                members_of: Callable[[str], set[str]]) -> dict[str, list[str]]:
    """``gang_of(uid)``: the named gang of a bound pod, if any; ``members_of(gang)``: its bound uids."""
    kept = {}
    for node, uids in victims.items():
        chosen = set(uids)
        broken = [g for uid in uids if (g := gang_of(uid)) is not None
                  and len(members_of(g)) > 1 and not members_of(g) <= chosen]
        if broken:
            continue
        freed = sum(u.gpus for uid in uids if (u := state.pod(uid)) is not None and u.node == node)
        own = own_slot.gpus if own_slot is not None and own_slot.node == node else 0
        if gpus and state.free(node) + freed + own < gpus:
            continue
        kept[node] = list(uids)
    return kept
