"""Sliced gangs over random small clusters, against an oracle that counts slices by hand from
the nodes' labels (it uses no planner code and no Topology)."""

from __future__ import annotations

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from extender.core import verdicts
from extender.core.model import GangSpec, Level, Member, NodeFacts, PodUsage
from extender.core.placement.planner import NoPlacement, Placement, plan
from extender.core.cluster.state import ClusterState

LEVELS = (Level("block", "block"), Level("rack", "rack"))
HOST = "kubernetes.io/hostname"


@st.composite
def clusters(draw):
    """2-10 nodes under 1-2 blocks x 1-3 racks (names repeat across blocks; some lack a rack),
    4 or 8 GPUs each, random GPUs in use, some cordoned."""
    nodes, used = [], {}
    for i in range(draw(st.integers(2, 10))):
        block = draw(st.sampled_from(["b1", "b2"]))
        rack = draw(st.sampled_from(["r1", "r2", "r3", None]))
        total = draw(st.sampled_from([4, 8]))
        labels = {"block": block, **({"rack": rack} if rack else {})}
        nodes.append(NodeFacts(f"n{i}", labels, total, unschedulable=draw(st.integers(0, 5)) == 0,
                               allocatable=(("pods", 110),)))
        used[f"n{i}"] = draw(st.sampled_from([0, 0, total // 2, total]) | st.integers(0, total))
    return nodes, used


@st.composite
def sliced_gangs(draw):
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    size = draw(st.integers(1, 4))
    count = size * draw(st.integers(1, 4))
    level = draw(st.sampled_from(["rack", HOST]))
    required = draw(st.sampled_from([None, "block", "rack"] if level == "rack" else [None, "block", "rack", HOST]))
    ranks = draw(st.permutations(range(count)))
    members = tuple(Member(f"ml/p{i}", gpus, (r,)) for i, r in enumerate(ranks))
    return GangSpec("ml/g", members, count, 60.0, required=required, slice_size=size, slice_level=level)


def build(nodes, used, levels=LEVELS) -> ClusterState:
    """The nodes under ``levels``, with ``used[name]`` GPUs in use on each."""
    state = ClusterState(levels)
    for n in nodes:
        state.upsert_node(n)
        if used[n.name]:
            state.upsert_pod(PodUsage(f"uid-{n.name}", n.name, used[n.name]))
    return state


# -- the oracle: groups of nodes by their labels --------------------------------------------------

def group(node: NodeFacts, level: str | None) -> tuple:
    """The domain of ``level`` the node is in, by its labels (a node without a rack label is a
    rack of its own); None: the whole cluster."""
    if level is None:
        return ()
    if level == "block":
        return (node.labels["block"],)
    if level == "rack":
        rack = node.labels.get("rack")
        return (node.labels["block"], rack) if rack else ("no rack", node.name)
    return ("node", node.name)


def slots(node: NodeFacts, free: int, gpus: int) -> int:
    return 0 if node.unschedulable else max(free, 0) // gpus


def whole_slices(nodes, free, gang: GangSpec) -> int:
    """Slices a set of nodes holds: per slice-level domain, its pods // slice size."""
    per: dict[tuple, int] = {}
    for n in nodes:
        key = group(n, gang.slice_level)
        per[key] = per.get(key, 0) + slots(n, free[n.name], gang.members[0].gpus)
    return sum(v // gang.slice_size for v in per.values())


def feasible(nodes, free, gang: GangSpec) -> bool:
    """Some domain of the required level (or the cluster) holds every slice."""
    domains: dict[tuple, list[NodeFacts]] = {}
    for n in nodes:
        domains.setdefault(group(n, gang.required), []).append(n)
    return any(whole_slices(members, free, gang) >= gang.min_member // gang.slice_size
               for members in domains.values())


@settings(max_examples=400, deadline=None)
@given(clusters(), sliced_gangs())
def test_sliced_gang_against_the_oracle(cluster, gang):
    nodes, used = cluster
    state = build(nodes, used)
    free = {n.name: n.gpus - used[n.name] for n in nodes}
    by_name = {n.name: n for n in nodes}
    result = plan(gang, state.view())
    expected = feasible(nodes, free, gang)
    event("feasible" if expected else "infeasible")
    assert isinstance(result, Placement) == expected, (result, free)
    if not isinstance(result, Placement):
        return

    # Every member placed once, never over-committing a node, never on a cordoned one.
    slot_of = {s.member: s for s in result.slots}
    assert sorted(slot_of) == sorted(m.key for m in gang.members)
    taken: dict[str, int] = {}
    for s in result.slots:
        taken[s.node] = taken.get(s.node, 0) + s.gpus
    assert all(gpus <= free[node] and not by_name[node].unschedulable for node, gpus in taken.items())
    # The whole gang inside one domain of its required level.
    assert len({group(by_name[s.node], gang.required) for s in result.slots}) == 1

    # Ranks contiguous: members of ranks [kS, (k+1)S) share one domain of the slice level.
    ranked = sorted(gang.members, key=lambda m: m.rank)
    size = gang.slice_size
    cuts = [ranked[i:i + size] for i in range(0, len(ranked), size)]
    homes = []
    for piece in cuts:
        domains = {group(by_name[slot_of[m.key].node], gang.slice_level) for m in piece}
        assert len(domains) == 1, (piece, domains)
        homes.append(domains.pop())

    # The narrowest level: no domain of a narrower level than the gang's holds every slice.
    order = [None, "block", "rack", HOST]
    need = gang.min_member // size
    for narrower in order[order.index(level_word(result.level)) + 1:]:
        if order.index(narrower) <= order.index(gang.slice_level):
            per: dict[tuple, list[NodeFacts]] = {}
            for n in nodes:
                per.setdefault(group(n, narrower), []).append(n)
            assert all(whole_slices(ns, free, gang) < need for ns in per.values()), narrower

    # The fewest domains at every level below the gang's, down to the slice level: among the
    # children of the domains used one level up, no fewer of them hold every slice.
    used = [by_name[s.node] for s in result.slots]
    for up, lvl in zip(order, order[1:]):
        if order.index(lvl) <= order.index(level_word(result.level)) or order.index(lvl) > order.index(gang.slice_level):
            continue
        parents = {group(n, up) for n in used}
        children: dict[tuple, list[NodeFacts]] = {}
        for n in nodes:
            if group(n, up) in parents:
                children.setdefault(group(n, lvl), []).append(n)
        held = sorted((whole_slices(ns, free, gang) for ns in children.values()), reverse=True)
        fewest = next(k for k in range(1, len(held) + 1) if sum(held[:k]) >= need)
        event(f"{lvl}: fewest {min(fewest, 3)}+")
        assert len({group(n, lvl) for n in used}) == fewest, (lvl, held)

    # Below the slice level (hosts of a rack slice): each rack's pods on the fewest of its hosts.
    if gang.slice_level == "rack":
        g = gang.members[0].gpus
        for rack in {group(n, "rack") for n in used}:
            mine = [s.node for s in result.slots if group(by_name[s.node], "rack") == rack]
            caps = sorted((slots(n, free[n.name], g) for n in nodes if group(n, "rack") == rack), reverse=True)
            fewest = next(k for k in range(1, len(caps) + 1) if sum(caps[:k]) >= len(mine))
            assert len(set(mine)) == fewest, (rack, caps, mine)


def level_word(level: int) -> str | None:
    """A Placement's level (an index: -1 the whole cluster, then block, rack, host) as the
    oracle's word."""
    return [None, "block", "rack", HOST][level + 1]


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 4), st.lists(st.integers(1, 3), min_size=1, max_size=4), st.sampled_from([1, 2, 8]),
       st.sampled_from(["rack", HOST]))
def test_scattered_free_nodes_hold_no_slice(size, racks, gpus, level):
    """Every rack has fewer free nodes than a slice, one slot each: however many pods fit in
    total, no slice does, and the reason says 0 whole slices and how many pods fit."""
    racks = [min(n, size - 1) for n in racks]
    nodes, used = [], {}
    for r, count in enumerate(racks):
        for h in range(count):
            name = f"r{r}h{h}"
            nodes.append(NodeFacts(name, {"block": "b1", "rack": f"r{r}"}, 8, allocatable=(("pods", 110),)))
            used[name] = 8 - gpus  # exactly one pod of the gang fits each node
    pods = size * 2
    gang = GangSpec("ml/g", tuple(Member(f"ml/p{i}", gpus, (i,)) for i in range(pods)), pods, 60.0,
                    required="block", slice_size=size, slice_level=level)
    assume(level == "rack" or size > 1)
    state = build(nodes, used)
    result = plan(gang, state.view())
    assert isinstance(result, NoPlacement) and result.slices_fit == 0
    fit = min(pods, len(nodes))
    assert result.fits == fit
    text = verdicts.explain_no_placement(state.topology, result)
    pods_word = "pod" if fit == 1 else "pods"
    assert f"; best block b1 holds 0 of 2 slices: it fits {fit} {pods_word}, but only 0 in whole slices" in text
