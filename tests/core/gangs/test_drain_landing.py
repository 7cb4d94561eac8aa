"""A drained gang lands where it drained (``core.gangs.starvation.landing``), except a preemptor:
the gang book with a manual ``now``.

    rack r1: nvl n1: a1 a2      rack r2: nvl n2: b1      rack r3: nvl n3: c1   (8 GPUs each)

Every node runs a pod; gang ``ml/g`` (2 x 8 GPUs, no topology request) starves and drains nvl
n1, the only domain narrower than the cluster that holds it. Then b1 and c1 free: the gang fits
across two racks.
"""

from __future__ import annotations

from extender.core.gangs import gangspec
from extender.core.gangs.book import GangBook
from extender.core.gangs.lifecycle import HOLDING
from extender.core.gangs.starvation import DRAIN
from extender.core.model import MIN_MEMBER, Declaration, GangRef, Level, NodeFacts, PodFacts, PodUsage
from extender.core.cluster.state import ClusterState

LEVELS = (Level("rack", "rack"), Level("nvl", "nvlink"))
NODES = {"a1": ("r1", "n1"), "a2": ("r1", "n1"), "b1": ("r2", "n2"), "c1": ("r3", "n3")}


def drained() -> tuple[ClusterState, GangBook]:
    state = ClusterState(LEVELS)
    state.set_nodes(NodeFacts(n, {"rack": r, "nvl": v}, 8, allocatable=(("pods", 110),)) for n, (r, v) in NODES.items())
    for node in NODES:
        state.upsert_pod(PodUsage(f"run-{node}", node, 8))
    book = GangBook(state, starvation_seconds=60.0)
    assert planned(book, 1000.0) == set()
    assert planned(book, 1061.0) == set()
    assert {s.node for s in state.reservations()[f"ml/g{DRAIN}"].slots} == {"a1", "a2"}
    state.delete_pod("run-b1")
    state.delete_pod("run-c1")
    return state, book


def spec():
    decls = (Declaration(MIN_MEMBER, "railyard.io/min-member", "2", 0),)
    pods = [PodFacts("ml", f"g-{i}", f"uid-g-{i}", GangRef("ml/g", True), gpus=8, rank=(i,), declarations=decls)
            for i in range(2)]
    return gangspec.build("ml/g", pods, None, 60.0)


def planned(book: GangBook, now: float, **kw) -> set[str]:
    rec = book.record("ml/g", now)
    book.prepare(rec, "ml/g-0")
    book.reserve(rec, spec(), now, **kw)
    return {s.node for s in rec.placement.slots} if rec.phase in HOLDING else set()


def test_a_drained_gang_waits_for_its_drain_while_only_a_wider_domain_holds_it():
    state, book = drained()
    assert planned(book, 1070.0) == set()
    assert f"ml/g{DRAIN}" in state.reservations()


def test_a_preemptor_goes_where_its_victims_make_room_drain_or_not():
    # Preemption plans the gang on the cluster without its victims (``view``) in the domain it
    # chose; a drain must not turn that plan down (it would evict nothing and wait).
    state, book = drained()
    assert planned(book, 1070.0, view=state.view(), homes=()) == {"b1", "c1"}
    assert f"ml/g{DRAIN}" not in state.reservations()
