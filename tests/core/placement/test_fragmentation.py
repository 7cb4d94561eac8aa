"""Among equally tight placements, the one that leaves whole nodes and whole domains for the
large gangs that come later (issue 23 item 4), never at the cost of the narrowest level or the
best fit (a property over random clusters, against brute force)."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from extender.core.model import GangSpec, Member
from extender.core.placement.planner import Placement, plan
from tests.core.placement.test_properties import build, clusters, fits, narrowest_feasible
from tests.topologies import cluster, gang

NVL = "network.topology.nvidia.com/accelerator"

# n1 has three whole free nodes; n2 the same 24 free GPUs, but two of its nodes are half used.
TWO_NVL = """
block b1
  rack r1
    nvl n1: a1 a2 a3 a4[0/8]
    nvl n2: b1 b2 b3[4/8] b4[4/8]
"""


def test_equal_fits_take_the_domain_with_fewer_whole_nodes():
    w = cluster(TWO_NVL)
    (a,) = w.plan_pending(gang("g", 2, 8))
    # Both NVLink domains leave 8 GPUs over: n2's two halves, or one whole node of n1. The gang
    # takes n2's whole nodes, so n1 keeps its three whole nodes...
    assert a.level == NVL and sorted(a.placement.values()) == ["b1", "b2"]
    # ... and a gang of three whole nodes that comes next still fits one NVLink domain.
    (later,) = w.plan_pending(gang("big", 3, 8))
    assert later.level == NVL and sorted(later.placement.values()) == ["a1", "a2", "a3"]


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 5), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([None, "block", "rack"]))
def test_the_tie_break_never_gives_up_the_narrowest_level_or_the_best_fit(cluster_, count, gpus, required):
    state = build(*cluster_)
    spec = GangSpec("ml/g", tuple(Member(f"ml/p{i}", gpus) for i in range(count)), count, 60.0, required=required)
    result = plan(spec, state.view())
    best = narrowest_feasible(state, spec)
    if best is None or not isinstance(result, Placement):
        assert best is None and not isinstance(result, Placement)
        return
    topo = state.topology
    assert result.level == best or (best == topo.depth and result.level == topo.depth)

    def usable(i: int) -> int:
        return 0 if topo.nodes[i].unschedulable else max(state.free(topo.names[i]), 0)

    # Best fit at that level: no domain that holds the gang has fewer GPUs left over.
    lvl = result.level
    leftovers = []
    for d in range(topo.domain_count(lvl)):
        dom = topo.domain(lvl, d)
        if 0 <= lvl < topo.depth and dom.path[-1] is None:
            continue  # a node-private "no label" domain: only as its node
        avail = [usable(i) for i in range(dom.start, dom.end)]
        if fits(avail, [gpus] * count):
            leftovers.append(sum(avail) - gpus * count)
    chosen = sum(usable(i) for i in range(result.domain.start, result.domain.end)) - gpus * count
    event(f"{len(leftovers)} fitting domains")
    assert chosen == min(leftovers), (chosen, leftovers)
