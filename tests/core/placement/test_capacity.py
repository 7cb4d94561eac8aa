"""``capacity.lacks_room``: whether some domain of the gang's required level has, counted node by
node, a slot for each of its GPU pods and its GPUs in all (the brute-force property is in
``test_properties``).

    block b1: rack r1: a1 (8 free) a2 (4 free)    rack r2: c1 (8 free)
    block b2: rack r1: d1 (0 free)
"""

from __future__ import annotations

from extender.core.cluster.state import Reservation, Slot
from extender.core.model import GangSpec, Member
from extender.core.placement.capacity import lacks_room
from extender.core.placement.planner import NoPlacement, Placement, plan
from tests.core.placement.test_properties import build, node


def state(cordoned: str = ""):
    nodes = [node(n, path, 8, unschedulable=n == cordoned)
             for n, path in (("a1", ("b1", "r1")), ("a2", ("b1", "r1")), ("c1", ("b1", "r2")), ("d1", ("b2", "r1")))]
    return build(nodes, [0, 4, 0, 8])


def gang(*gpus: int, required: str | None = None) -> GangSpec:
    return GangSpec("ml/g", tuple(Member(f"ml/p{i}", g) for i, g in enumerate(gpus)), len(gpus), 60.0,
                    required=required)


def short(g: GangSpec, s=None, also: dict[str, int] | None = None) -> bool:
    s = s or state()
    result = lacks_room(g, s.view(), also or {})
    if result:  # the planner agrees wherever the bound says so
        assert isinstance(plan(g, s.view()), NoPlacement)
    return result


def test_each_domain_of_the_required_level_counts_alone():
    assert short(gang(8, 8, required="rack"))  # r1: one node with 8 free; r2: one node
    assert not short(gang(8, 8, required="block"))  # b1: a1 and c1
    assert not short(gang(8, 8))
    assert short(gang(8, 8, 8))  # 20 GPUs free, but two nodes with 8


def test_slots_are_counted_node_by_node_with_the_smallest_pod():
    assert not short(gang(4, 4, 4, required="rack"))  # a1 holds two, a2 one
    assert isinstance(plan(gang(4, 4, 4, required="rack"), state().view()), Placement)
    assert not short(gang(8, 4, required="rack"))
    assert short(gang(8, 4, 4, required="rack")), "16 GPUs asked, 12 free in r1"
    assert short(gang(2, 2, 2, 2, 2, 2, 2, required="rack")), "7 pods of 2, 6 slots in r1"


def test_a_cordoned_node_counts_nothing():
    assert not short(gang(8, 8, required="block"))
    assert short(gang(8, 8, required="block"), state(cordoned="c1"))


def test_the_gangs_own_drain_counts_as_free():
    s = state()
    s.reserve(Reservation("ml/g#drain", (Slot("ml/p0#drain", "c1", 8),), float("inf")))
    assert short(gang(8, 8, required="block"), s)
    assert not lacks_room(gang(8, 8, required="block"), s.view(), {"c1": 8})


def test_a_gang_of_no_gpus_is_never_short():
    assert not short(gang(0, 0, required="rack"))
