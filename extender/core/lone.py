"""Lone pods (pods that name no gang): filter, scores and the veto on the scheduler's victims.
Nothing is reserved, and no work is done per node name where railyard has nothing to add
(issue 13: at 5,000 nodes a loop over every name cost more than kube-scheduler's own cycle).

- filter: kube-scheduler sends only the nodes that passed its own filters (GPU fit, counting the
  pods it has assumed, which railyard's watch sees later), so railyard looks only at the nodes
  it knows more about: those holding GPUs reserved for gangs (fail when the pod's GPUs are not
  free after the reservation), those an exclusive gang's claim holds (fail, naming the gang and
  the domain: ``railyard.io/exclusive-topology``) and those it sees cordoned or not ready. Every
  other name passes, as does a node railyard has not cached yet.
- a pod with a value railyard could not read (its GPUs among them) passes no node: the reason
  on each, unresolvable.
- prioritize: best fit, 0..10 in steps of the node's GPU count (fewer GPUs left free scores
  higher), so single pods pack and large free nodes stay whole for gangs. kube-scheduler adds
  Score x weight x 10 to each host listed and nothing to the others, so every score is lowered
  by the lowest one and hosts left at 0 are not listed: the same choice, a reply only as long as
  the hosts that differ (none on a cluster of identical empty nodes). A member with a planned
  slot lists only its node.
- preempt: kube-scheduler chooses the victims for a pod of no gang; railyard keeps a candidate
  node (with the victims chosen on it) only if no victim belongs to a gang of several pods unless
  every bound member of that gang is among this node's victims (never break a running gang), and
  after the victims leave the node has the preemptor's GPUs free without touching GPUs reserved
  for other gangs (the preemptor's own planned slot on the node counts as free). A gang's own
  preemption is ``gangs.preemption``.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from extender.core import verdicts
from extender.core.cluster.state import ClusterState, Slot, View
from extender.core.verdicts import FilterVerdict

MAX_SCORE = 10


def filter_unreadable(pod: str, problems: tuple[str, ...], names: Sequence[str]) -> FilterVerdict:
    """A pod with values the translator could not read (GPUs among them: ``abc`` is not 0 GPUs)
    is placed nowhere, as a gang with a problem is: the reason on every node, unresolvable."""
    reason = verdicts.unreadable_pod(pod, problems)
    return FilterVerdict((), {}, {n: reason for n in names})


def filter_single(view: View, gpus: int, names: Sequence[str]) -> FilterVerdict:
    topology, blocked, free, reserved = view.topology, view.blocked, view.free, view.reserved
    suspects = [topology.names[i] for i in view.blocked_nodes]
    suspects += view.reserved_nodes
    suspects += [topology.names[i] for i in view.held]
    if not suspects:
        return FilterVerdict(tuple(names))
    index = topology.index
    failed = {}
    for name in suspects:
        i = index.get(name)
        if i is None:
            continue
        why, hold = blocked[i], view.held.get(i)
        if hold is not None:
            failed[name] = verdicts.held_node(topology, name, hold.gang, hold.domain)
        elif why is not None:
            failed[name] = verdicts.node_blocked(why, gpus)
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
        if i is None or not total:
            scores.append(0)
            continue
        leftover = min(max(free[i] - gpus, 0), total)
        scores.append(MAX_SCORE - MAX_SCORE * leftover // total)
    low = min(scores, default=0)
    return [(name, score - low) for name, score in zip(names, scores) if score > low]


def planned_scores(node: str, names: Sequence[str]) -> list[tuple[str, int]]:
    return [(node, MAX_SCORE)] if node in names else []


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
