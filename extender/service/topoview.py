"""The live topology view's snapshot (``railyard serve``'s view port, docs/view.md): what the
cache holds, copied under the service lock in O(nodes + gangs) list and dict copies, so the
lock is held for as short as possible; everything else (grouping, JSON) happens outside it,
on values that no later change can touch.

What is copied and why it is enough: the topology tree is read-only (a node's facts are
swapped in ``nodes``, so that list is copied); GPUs used and blocked nodes are copied;
reservations, placements and domains are frozen values, so references suffice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from extender.core.cluster.state import Reservation
from extender.core.cluster.topology import Domain, Topology
from extender.core.gangs.lifecycle import HOLDING, Phase
from extender.core.model import NodeFacts
from extender.core.placement.planner import Placement
from extender.service.context import Context


@dataclass(frozen=True)
class GangSnapshot:
    gang: str
    phase: str
    reason: str
    placement: Placement | None
    """Its plan while it holds it (planned, waiting, binding) or was bound with it; None otherwise
    (a gang that timed out or was unreserved keeps its last plan in the book, not here)."""
    closest: Domain | None
    """With no plan: the domain that came closest (the reason's "best ... fits")."""
    at_bind: int
    min_member: int
    deadline_in_seconds: float | None
    """Seconds left while it holds a reservation."""


@dataclass(frozen=True)
class TopologySnapshot:
    topology: Topology
    nodes: tuple[NodeFacts, ...]
    """In node index order, as they were at the snapshot."""
    used: Mapping[str, int]
    """GPUs pods hold, per node name (nodes with none are absent)."""
    blocked: tuple[str | None, ...]
    """Per node index: cordoned, not ready, or None."""
    reservations: Mapping[str, Reservation]
    gangs: tuple[GangSnapshot, ...]


def snapshot(ctx: Context, now: float) -> TopologySnapshot:
    """Under the service lock: copies only, no grouping, no formatting."""
    state = ctx.state
    view = state.view()
    gangs = tuple(GangSnapshot(
        gang=rec.key, phase=rec.phase.value, reason=rec.reason,
        placement=rec.placement if rec.phase in HOLDING or rec.phase == Phase.BOUND else None, closest=rec.closest, at_bind=len(rec.waiting), min_member=rec.min_member,
        deadline_in_seconds=max(round(rec.deadline - now, 1), 0.0)
        if rec.deadline is not None and rec.phase in HOLDING else None,
    ) for rec in ctx.book.records())
    return TopologySnapshot(view.topology, tuple(view.topology.nodes), dict(state.used()), tuple(view.blocked),
                            dict(state.reservations()), gangs)

