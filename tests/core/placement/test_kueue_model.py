"""railyard against a model of Kueue's BestFit slice packing, over random clusters: never more
domains at any level, compared block count first, then racks, then hosts.

The model follows kubernetes-sigs/kueue@v0.17.0 pkg/cache/scheduler/tas_flavor_snapshot.go for
one PodSet, no leader, its topology required at the block level (``findTopologyAssignment``):
- counts (``fillInCounts``): a host holds ``state`` pods; at the slice level ``sliceState`` =
  state // S; above it the sums of the children's; below it 0;
- the block (``findLevelWithFitDomains``): domains sorted by sliceState descending, state
  ascending, name; the best fit (``findBestFitDomainBy``: the first with the fewest slices that
  still holds them all), or no fit;
- down to the slice level, over all children of the domains chosen (``lowerLevelDomains``),
  sorted the same way, greedily in slices, the last one the best fit
  (``updateCountsToMinimumGeneric``); below the slice level, per domain, in pods.
It is written from the Go source, not from railyard's code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from extender.core.model import GangSpec, Level, Member, NodeFacts
from extender.core.placement.planner import Placement, plan
from tests.core.placement.test_slice_properties import build

LEVELS = (Level("block", "block"), Level("rack", "rack"))
HOST = "kubernetes.io/hostname"


@dataclass
class Dom:
    name: tuple[str, ...]
    children: list["Dom"] = field(default_factory=list)
    state: int = 0
    slices: int = 0


def counts(d: Dom, depth: int, slice_depth: int, size: int) -> None:
    """Fill state and sliceState bottom up (depth: 0 block, 1 rack, 2 host)."""
    for c in d.children:
        counts(c, depth + 1, slice_depth, size)
    if d.children:
        d.state = sum(c.state for c in d.children)
        d.slices = sum(c.slices for c in d.children)
    if depth == slice_depth:
        d.slices = d.state // size
    elif depth > slice_depth:
        d.slices = 0


def order(ds: list[Dom]) -> list[Dom]:
    return sorted(ds, key=lambda d: (-d.slices, d.state, d.name))


def best_fit(ds: list[Dom], needed: int, cap) -> Dom:
    best = ds[0]
    for d in ds:
        if cap(d) >= needed and cap(d) < cap(best):
            best = d
    return best


def minimum(ds: list[Dom], needed: int, cap) -> list[tuple[Dom, int]]:
    out = []
    for i, d in enumerate(ds):
        if cap(d) >= needed:
            d = best_fit(ds[i:], needed, cap)
            return [*out, (d, needed)]
        out.append((d, cap(d)))
        needed -= cap(d)
    raise AssertionError("the domains were checked to hold the gang")


def kueue(hosts: dict[tuple[str, str, str], int], size: int, slices: int, slice_depth: int):
    """Pods per host of Kueue's assignment, or None when the block level cannot hold it."""
    blocks: dict[str, Dom] = {}
    for (b, r, h), state in sorted(hosts.items()):
        block = blocks.setdefault(b, Dom((b,)))
        rack = next((x for x in block.children if x.name == (b, r)), None)
        if rack is None:
            rack = Dom((b, r))
            block.children.append(rack)
        rack.children.append(Dom((b, r, h), state=state))
    for d in blocks.values():
        counts(d, 0, slice_depth, size)
    ranked = order(list(blocks.values()))
    if not ranked or ranked[0].slices < slices:
        return None
    chosen = [(best_fit(ranked, slices, lambda d: d.slices), slices)]
    depth = 0
    while depth < slice_depth:  # flattened, in slices
        chosen = minimum(order([c for d, _ in chosen for c in d.children]), slices, lambda d: d.slices)
        depth += 1
    chosen = [(d, n * size) for d, n in chosen]
    while depth < 2:  # per domain, in pods
        chosen = [x for d, n in chosen for x in minimum(order(d.children), n, lambda d: d.state)]
        depth += 1
    return {d.name[2]: n for d, n in chosen}


@st.composite
def clusters(draw):
    """2-9 hosts of 1-GPU slots under 1-2 blocks x 1-3 racks; free 0-8 each."""
    hosts = {}
    for i in range(draw(st.integers(2, 9))):
        hosts[(draw(st.sampled_from(["b1", "b2"])), draw(st.sampled_from(["r1", "r2", "r3"])), f"h{i}")] = \
            draw(st.integers(0, 8))
    return hosts


def used(assignment: dict[str, int], where: dict[str, tuple[str, str]]) -> tuple[int, int, int]:
    hosts = [h for h, n in assignment.items() if n]
    return len({where[h][0] for h in hosts}), len({where[h] for h in hosts}), len(hosts)


@settings(max_examples=400, deadline=None)
@given(clusters(), st.integers(1, 4), st.integers(1, 4), st.sampled_from([1, 2]))
# Both blocks hold the 3 rack slices of 3 in one rack; b2's rack fits exactly over 3 hosts,
# b1's has 1 GPU over on 2 hosts, where Kueue (b1 before b2 by name) puts them.
@example({("b1", "r1", "h0"): 4, ("b2", "r2", "h1"): 5, ("b1", "r1", "h2"): 0, ("b2", "r2", "h3"): 1,
          ("b2", "r2", "h4"): 3, ("b1", "r1", "h5"): 6, ("b2", "r1", "h6"): 1, ("b1", "r1", "h7"): 0}, 3, 3, 1)
def test_never_more_domains_than_kueue(hosts, size, slices, slice_depth):
    nodes = [NodeFacts(h, {"block": b, "rack": r}, 8, allocatable=(("pods", 110),)) for b, r, h in hosts]
    state = build(nodes, {h: 8 - n for (_, _, h), n in hosts.items()}, LEVELS)
    count = size * slices
    spec = GangSpec("ml/g", tuple(Member(f"ml/p{i}", 1, (i,)) for i in range(count)), count, 60.0,
                    required="block", slice_size=size, slice_level=HOST if slice_depth == 2 else "rack")
    theirs = kueue(hosts, size, slices, slice_depth)
    result = plan(spec, state.view())
    assert isinstance(result, Placement) == (theirs is not None), (result, theirs)
    if theirs is None:
        return
    assert isinstance(result, Placement)
    mine = {}
    for s in result.slots:
        mine[s.node] = mine.get(s.node, 0) + 1
    where = {h: (b, r) for b, r, h in hosts}
    a, b = used(mine, where), used(theirs, where)
    event("tighter" if a < b else "equal" if a == b else "looser")
    assert a <= b, (mine, theirs)


def test_the_model_gives_kueues_own_answers():
    """The model on cases of TestFindTopologyAssignments (pkg/cache/scheduler/tas_cache_test.go at
    v0.17.0; tests/core/placement/test_kueue_slices.py has them all), block required."""
    def one_rack(**free):
        return {("b1", "r1", h): n for h, n in free.items()}

    # "... host required for slices; optimize last domain; BestFit"
    assert kueue(one_rack(x3=4, x5=3, x1=2), 2, 3, 2) == {"x1": 2, "x3": 4}
    # "... prioritize more free slice capacity first and then tight fit; BestFit"
    assert kueue(one_rack(x3=6, x5=5, x1=4, x6=2), 2, 6, 2) == {"x1": 4, "x3": 6, "x6": 2}
    # "... host required for slices; select domains with tight fit; BestFit"
    assert kueue(one_rack(x3=3, x5=2, x1=2), 2, 2, 2) == {"x1": 2, "x5": 2}
    # "multi-layer topology: no feature gate; additional layers ignored" (rack slices of 4)
    two_racks = {("b1", "r1", "x1"): 1, ("b1", "r1", "x2"): 4, ("b1", "r2", "x3"): 3, ("b1", "r2", "x4"): 4}
    assert kueue(two_racks, 4, 2, 1) == {"x1": 1, "x2": 3, "x3": 3, "x4": 1}
    # "... rack required for slices; podset fits in both blocks, but slices fit in only one block"
    five = {("b1", "r1", "x3"): 2, ("b1", "r2", "x5"): 2, ("b1", "r3", "x1"): 2,
            ("b2", "r4", "x6"): 3, ("b2", "r5", "x2"): 3}
    assert kueue(five, 3, 2, 1) == {"x6": 3, "x2": 3}
