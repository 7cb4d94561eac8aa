"""``ClusterState.writes``: it moves with every change a plan reads, and only then (a gang that
found no room is not planned again on the same count: ``GangBook.reserve``)."""

from __future__ import annotations

import dataclasses

from extender.core.cluster.state import ClusterState, Reservation, Slot
from extender.core.model import Level, NodeFacts, PodUsage

LEVELS = (Level("rack", "rack"), Level("nvl", "nvlink"))


def moves(state: ClusterState, change) -> bool:
    before = state.writes
    change()
    return state.writes != before


def test_every_change_a_plan_reads_moves_the_count_and_nothing_else_does():
    nodes = [NodeFacts(n, {"rack": "r1", "nvl": "n1"}, 8) for n in ("a1", "a2")]
    state = ClusterState(LEVELS)
    assert moves(state, lambda: state.set_nodes(nodes))
    topo = state.topology
    a1 = state.node("a1")
    assert not moves(state, lambda: state.upsert_node(a1)), "the same node again (a heartbeat)"
    assert moves(state, lambda: state.upsert_node(dataclasses.replace(a1, unschedulable=True)))
    usage = PodUsage("u1", "a2", 4)
    assert moves(state, lambda: state.upsert_pod(usage))
    assert not moves(state, lambda: state.upsert_pod(usage))
    assert moves(state, lambda: state.reserve(Reservation("ml/g", (Slot("ml/g-0", "a2", 4),), 60.0)))
    assert moves(state, lambda: state.drop_slot("ml/g-0"))
    assert moves(state, lambda: state.reserve(Reservation("ml/h", (Slot("ml/h-0", "a2", 2),), 60.0)))
    assert moves(state, lambda: state.release("ml/h"))
    assert not moves(state, lambda: state.release("ml/h"))
    assert moves(state, lambda: state.delete_pod("u1"))
    assert moves(state, lambda: state.claims.claim(topo, "ml/x", 1, ["a1"]))
    assert moves(state, lambda: state.claims.unclaim("ml/x"))
    assert not moves(state, lambda: state.claims.unclaim("ml/x"))
    assert moves(state, lambda: state.delete_node("a1"))
    assert not moves(state, lambda: state.view())
