"""Planner invariants over random small clusters, checked against brute force."""

from __future__ import annotations

import math

from hypothesis import event, given, settings
from hypothesis import strategies as st

from extender.core.model import Eligibility, GangSpec, Level, Member, NodeFacts, PodUsage
from extender.core.gangs.starvation import DRAIN
from extender.core.placement.capacity import lacks_room
from extender.core.placement.planner import NoPlacement, Placement, plan
from extender.core.cluster.state import ClusterState, Reservation, Slot
from extender.core.cluster.topology import Topology

LEVELS = (Level("block", "block"), Level("rack", "rack"))


def node(name, path, gpus, **kw) -> NodeFacts:
    """A node at ``path`` (block, rack); None: that label is missing."""
    labels = {lvl.key: v for lvl, v in zip(LEVELS, path) if v is not None}
    return NodeFacts(name, labels, gpus, allocatable=(("pods", 110),), **kw)


@st.composite
def clusters(draw):
    """2-7 nodes under 1-2 blocks x 1-2 racks (names repeat across blocks), random free GPUs."""
    n = draw(st.integers(2, 7))
    nodes, used = [], []
    for i in range(n):
        block = draw(st.sampled_from(["b1", "b2"]))
        rack = draw(st.sampled_from(["r1", "r2", None]))
        total = draw(st.sampled_from([4, 8]))
        nodes.append(node(f"n{i}", (block, rack), total,
                          unschedulable=draw(st.booleans()) and draw(st.booleans())))
        used.append(draw(st.integers(0, total)))
    return nodes, used


@st.composite
def gangs(draw):
    sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=5))
    required = draw(st.sampled_from([None, "block", "rack", "kubernetes.io/hostname"]))
    members = tuple(Member(f"ml/p{i}", s) for i, s in enumerate(sizes))
    return GangSpec("ml/g", members, len(members), 60.0, required=required)


def build(nodes, used) -> ClusterState:
    state = ClusterState(LEVELS)
    for node, u in zip(nodes, used):
        state.upsert_node(node)
        if u:
            state.upsert_pod(PodUsage(f"uid-{node.name}", node.name, u))
    return state


def fits(avail: list[int], sizes: list[int]) -> bool:
    """Brute force: can the items be packed into the bins?"""
    sizes = sorted(sizes, reverse=True)

    def go(i: int) -> bool:
        if i == len(sizes):
            return True
        tried = set()
        for j in range(len(avail)):
            if avail[j] >= sizes[i] and avail[j] not in tried:
                tried.add(avail[j])
                avail[j] -= sizes[i]
                ok = go(i + 1)
                avail[j] += sizes[i]
                if ok:
                    return True
        return False

    return go(0)


def narrowest_feasible(state: ClusterState, gang: GangSpec) -> int | None:
    """Brute force over every domain of every level, host level first."""
    topo = state.topology
    bound = -1 if gang.required is None else topo.level_index(gang.required)
    sizes = [m.gpus for m in gang.members]
    for lvl in range(topo.depth, bound - 1, -1):
        for d in range(topo.domain_count(lvl)):
            dom = topo.domain(lvl, d)
            if 0 <= lvl < topo.depth and dom.path[-1] is None:
                continue  # a node-private "no label" domain: only as its node
            avail = [max(state.free(topo.names[i]), 0) if not topo.nodes[i].unschedulable else 0
                     for i in range(dom.start, dom.end)]
            if fits(avail, sizes):
                return lvl
    return None


@settings(max_examples=300, deadline=None)
@given(clusters(), gangs())
def test_planner_matches_brute_force(cluster, gang):
    state = build(*cluster)
    result = plan(gang, state.view())
    best = narrowest_feasible(state, gang)
    topo = state.topology
    if best is None:
        assert isinstance(result, NoPlacement)
        return
    # Never call a feasible gang infeasible; land at the narrowest level that can hold it.
    assert isinstance(result, Placement), (best, result)
    assert result.level >= best or (best == topo.depth and result.level == topo.depth)
    # Never over-commit, never use a cordoned node.
    per_node: dict[str, int] = {}
    for slot in result.slots:
        per_node[slot.node] = per_node.get(slot.node, 0) + slot.gpus
    for node, gpus in per_node.items():
        assert gpus <= state.free(node)
        assert not state.node(node).unschedulable
    # A required level is always honoured.
    if gang.required is not None:
        assert result.level >= topo.level_index(gang.required)
    # Every member got exactly one slot of its size.
    assert sorted((s.member, s.gpus) for s in result.slots) == sorted((m.key, m.gpus) for m in gang.members)


@settings(max_examples=300, deadline=None)
@given(clusters(), gangs(), st.data())
def test_a_gang_found_short_of_room_has_no_placement_by_brute_force(cluster, gang, data):
    """``capacity.lacks_room`` is a necessary condition: never True for a gang brute force
    places, its own drain counted free (its plan gives the drain back first)."""
    state = build(*cluster)
    drained = data.draw(st.lists(st.sampled_from(state.topology.names), max_size=3, unique=True))
    slots = tuple(Slot(f"ml/p{i}{DRAIN}", n, data.draw(st.integers(1, 4))) for i, n in enumerate(drained))
    state.reserve(Reservation(f"ml/g{DRAIN}", slots, float("inf")))
    short = lacks_room(gang, state.view(), {s.node: s.gpus for s in slots})
    state.release(f"ml/g{DRAIN}")
    event(f"short of room: {short}")
    if short:
        assert narrowest_feasible(state, gang) is None


@settings(max_examples=200, deadline=None)
@given(clusters(), st.lists(gangs(), min_size=1, max_size=4))
def test_reserve_then_release_restores_every_counter(cluster, gang_list):
    state = build(*cluster)
    before = {n.name: state.free(n.name) for n in cluster[0]}
    held = []
    for i, g in enumerate(gang_list):
        g = GangSpec(f"ml/g{i}", tuple(Member(f"ml/g{i}-{m.key}", m.gpus) for m in g.members),
                     g.min_member, 60.0, required=g.required)
        result = plan(g, state.view())
        if isinstance(result, Placement):
            state.reserve(Reservation(g.key, result.slots, math.inf))
            held.append(g.key)
        # Two gangs never hold overlapping GPUs: free never goes negative.
        assert all(state.free(n.name) >= min(0, before[n.name]) for n in cluster[0])
    for key in reversed(held):
        state.release(key)
    assert {n.name: state.free(n.name) for n in cluster[0]} == before
    view = state.view()
    assert view.free == [before[name] for name in view.topology.names]


@given(st.permutations([f"n{i}" for i in range(6)]))
def test_topology_does_not_depend_on_input_order(order):
    paths = {"n0": ("b1", "r1"), "n1": ("b1", "r1"), "n2": ("b2", "r1"),
             "n3": ("b2", None), "n4": ("b1", "r2"), "n5": ("b2", "r1")}
    topo = Topology(LEVELS, [node(n, paths[n], 8) for n in order])
    assert topo.names == ("n0", "n1", "n4", "n2", "n5", "n3")
    # Every domain is contiguous and equal rack names under two blocks stay apart.
    assert [tuple(p) for p in topo.paths[1]] == [("b1", "r1"), ("b1", "r2"), ("b2", "r1"), ("b2", None)]


def test_counter_updates_do_not_rebuild_the_tree():
    state = build([node("a", ("b1", "r1"), 8), node("b", ("b1", "r1"), 8)], [0, 0])
    tree = state.topology
    state.upsert_pod(PodUsage("p", "a", 4))
    state.upsert_node(node("b", ("b1", "r1"), 8, unschedulable=True))
    state.delete_pod("p")
    assert state.topology is tree
    assert state.view().free == [8, 8] and state.view().blocked == [None, "cordoned"]
    state.upsert_node(node("b", ("b1", "r2"), 8))  # a label moved: a new tree
    assert state.topology is not tree and state.topology.node_paths[1] == ("b1", "r2")


def test_bound_pod_consumes_its_reserved_slot():
    state = build([node("a", ("b1", "r1"), 8)], [0])
    gang = GangSpec("ml/g", (Member("ml/p0", 8),), 1, 60.0)
    result = plan(gang, state.view())
    state.reserve(Reservation("ml/g", result.slots, 10.0))
    assert state.free("a") == 0
    state.upsert_pod(PodUsage("uid-p0", "a", 8), member_key="ml/p0")
    assert state.free("a") == 0 and state.reservation("ml/g") is None
    state.delete_pod("uid-p0")
    assert state.free("a") == 8


def test_brute_force_helper_is_not_trivial():
    assert fits([8, 4], [8, 4]) and not fits([6, 6], [8]) and not fits([4, 4], [4, 4, 2])
    assert fits([6, 2], [4, 2, 2]) and not fits([5, 3], [4, 4])


def test_natural_order_and_look_alike_values_stay_apart():
    nodes = [node(n, (b, r), 8) for n, b, r in
             [("h10", "b1", "r1"), ("h9", "b1", "r1"), ("x", "b1", "r01"), ("y", "b1", "r1")]]
    topo = Topology(LEVELS, nodes)
    assert topo.names == ("x", "h9", "h10", "y")
    assert [tuple(p) for p in topo.paths[1]] == [("b1", "r01"), ("b1", "r1")]


# -- eligibility: one class of pods with a CPU request and a node selector -----------------------


@st.composite
def eligible_clusters(draw):
    """2-7 nodes, each with a pool label (or none), free GPUs and free CPU drawn apart."""
    n = draw(st.integers(2, 7))
    nodes, used_gpus, used_cpu = [], [], []
    for i in range(n):
        block, rack = draw(st.sampled_from(["b1", "b2"])), draw(st.sampled_from(["r1", "r2"]))
        pool = draw(st.sampled_from(["x", "y", None]))
        labels = {"block": block, "rack": rack, **({"pool": pool} if pool else {})}
        nodes.append(NodeFacts(f"n{i}", labels, 8, allocatable=(("cpu", 16000), ("pods", 110))))
        used_gpus.append(draw(st.integers(0, 8)))
        used_cpu.append(draw(st.sampled_from([0, 4000, 12000, 16000])))
    return nodes, used_gpus, used_cpu


@settings(max_examples=300, deadline=None)
@given(eligible_clusters(), st.integers(1, 4), st.sampled_from([1, 2, 4, 8]), st.sampled_from([0, 2000, 6000]),
       st.sampled_from([None, "x"]), st.sampled_from([None, "block", "rack"]))
def test_one_class_gang_against_brute_force_with_cpu_and_a_selector(cluster, count, gpus, cpu, pool, required):
    nodes, used_gpus, used_cpu = cluster
    state = ClusterState(LEVELS)
    for node, g, c in zip(nodes, used_gpus, used_cpu):
        state.upsert_node(node)
        state.upsert_pod(PodUsage(f"uid-{node.name}", node.name, g, (("cpu", c),) if c else ()))
    requests = tuple(sorted({"pods": 1, **({"cpu": cpu} if cpu else {})}.items()))
    e = Eligibility(node_selector=(("pool", pool),) if pool else (), requests=requests)
    gang = GangSpec("ml/g", tuple(Member(f"ml/p{i}", gpus, eligibility=e) for i in range(count)), count, 60.0,
                    required=required)
    result = plan(gang, state.view())
    topo = state.topology

    # The oracle, apart from the planner: how many of these pods each node holds by hand.
    def holds(name: str) -> int:
        node = state.node(name)
        if pool and node.labels.get("pool") != pool:
            return 0
        by_gpu = state.free(name) // gpus
        by_cpu = (16000 - state.taken(name).get("cpu", 0)) // cpu if cpu else by_gpu
        return max(0, min(by_gpu, by_cpu))

    bound = -1 if required is None else topo.level_index(required)
    feasible = any(sum(holds(topo.names[i]) for i in range(topo.domain(lvl, d).start, topo.domain(lvl, d).end)) >= count
                   for lvl in range(topo.depth, bound - 1, -1) for d in range(topo.domain_count(lvl))
                   if not (0 <= lvl < topo.depth and topo.domain(lvl, d).path[-1] is None))
    event("feasible" if feasible else "infeasible")
    assert isinstance(result, Placement) == feasible, (result, [holds(n) for n in topo.names])
    if isinstance(result, Placement):
        per_node: dict[str, int] = {}
        for s in result.slots:
            per_node[s.node] = per_node.get(s.node, 0) + 1
        assert all(n <= holds(node) for node, n in per_node.items())  # selector, GPUs and CPU all hold
        if required:
            assert result.level >= topo.level_index(required)
