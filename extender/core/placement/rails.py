"""Rail-aligned placement of a gang's partial-node members (docs/dra.md, "Rails").

In a rail-optimized fabric GPU *i* of every node reaches the scale-out network through rail
switch *i*: traffic between two ranks on different nodes stays on one rail only when their GPUs
sit on the same rails. A member that takes a whole node uses every rail and has nothing to
align; a gang of members that take part of a node (4 of 8 GPUs, say) and span nodes does.

Facts: ``NodeFacts.rails`` is, per rail, the node's DRA GPU devices on it that no claim holds
(``ledger``); the slots of planned gangs that name rails take them too (``View.reserved_rails``).
A member takes one device on each of ``size`` distinct rails.

Once the planner has chosen the domain and the nodes by counts (``planner``), ``align``:

1. picks the gang's rail set *R*: of the ``size``-rail sets free on the chosen nodes and the
   spare nodes of the same domain, the one free on the most nodes (ties: the lowest rails);
2. moves each member placed on a node where *R* is not free to a spare node of the *narrowest*
   domain that already holds the gang where *R* is free, so alignment never spreads a gang over
   a wider domain (an NVLink domain is worth more than a rail);
3. gives every member its rails: the first member on a node *R* where it is free, every other
   member the lowest free rails left there.

Only preferred: a gang with too few aligned nodes still lands, the mixed nodes last. A round of
replacements beside running members keeps their rail set (``GangSpec.rail_set``, read back from
the rails railyard told them) instead of choosing one, even a single member, and moves inside
the domain it must stay in (its running members') to nodes where that set is free. What an
extender cannot do: choose the devices. kube-scheduler's DRA allocator does, among the free
devices matching the claim; where exactly the member's count is free on the node the choice is
forced, otherwise a claim selector on the rail attribute makes it so.
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations, islice
from math import comb
from typing import Sequence

from extender.core.cluster.state import View

MAX_SETS = 256
"""Rail sets looked at per node; past it only runs of consecutive free rails are."""
MAX_SPARE = 512
"""Spare nodes looked at per gang (the first, in node order): planning stays bounded when a
gang spans a wide domain."""


def rail_order(rail: str) -> tuple[int, int, str]:
    """Rails in natural order: 2 before 10."""
    return (0, int(rail), "") if rail.isascii() and rail.isdigit() else (1, 0, rail)


def free_rails(view: View, i: int) -> list[str]:
    """The node's rails with a device no claim and no reservation holds, in natural order."""
    node = view.topology.nodes[i]
    if not node.rails:
        return []
    held = view.reserved_rails.get(node.name, {})
    return sorted((r for r, n in node.rails if n - held.get(r, 0) > 0), key=rail_order)


def wanted(view: View, gpus: int, nodes: Sequence[int], joined: bool = False) -> bool:
    """Whether members of ``gpus`` GPUs on these nodes have rails to align: they span nodes (or
    join running members on others: ``joined``), take part of a node, and some node names its
    rails."""
    topo = view.topology
    return ((len(nodes) > 1 or joined) and any(gpus < topo.nodes[i].gpus for i in nodes)
            and any(topo.nodes[i].rails for i in nodes))


def rail_sets(free: Sequence[str], size: int) -> list[tuple[str, ...]]:
    """The ``size``-rail sets of ``free`` (bounded: runs of consecutive rails past MAX_SETS)."""
    if len(free) < size:
        return []
    if comb(len(free), size) <= MAX_SETS:
        return list(combinations(free, size))
    return [tuple(free[k:k + size]) for k in range(len(free) - size + 1)]


def choose(view: View, size: int, nodes: Sequence[int]) -> tuple[str, ...] | None:
    """The ``size``-rail set free on the most of these nodes (ties: the lowest rails)."""
    counts: Counter[tuple[str, ...]] = Counter()
    for i in nodes:
        counts.update(rail_sets(free_rails(view, i), size))
    if not counts:
        return None
    return min(counts, key=lambda r: (-counts[r], [rail_order(x) for x in r]))


def align(view: View, size: int, chosen: dict[int, int], spare: Sequence[int],
          given: tuple[str, ...] = ()) -> tuple[dict[int, int], tuple[str, ...] | None]:
    """Steps 1 and 2: (members per node after the moves, the gang's rail set).

    ``chosen``: node -> members planned there; ``spare``: the other nodes of the narrowest
    domain holding ``chosen`` with room for one more member, in the order to take them;
    ``given``: the rail set of running members the planned ones join (a replacement round),
    kept instead of choosing one.
    """
    spare = spare[:MAX_SPARE]
    rails = given or choose(view, size, [*chosen, *spare])
    if rails is None:
        return chosen, None
    want = set(rails)
    aligned = {i for i in [*chosen, *spare] if want <= set(free_rails(view, i))}
    out = dict(chosen)
    targets = iter([i for i in spare if i in aligned])
    for node in sorted((n for n in chosen if n not in aligned), reverse=True):
        for target in islice(targets, out[node]):
            out[target] = 1
            out[node] -= 1
        if not out[node]:
            del out[node]
    return out, rails


def member_rails(view: View, i: int, rails: tuple[str, ...], size: int, members: int) -> list[tuple[str, ...]]:
    """Step 3: the rails of each of ``members`` members of ``size`` GPUs on node ``i``."""
    free = free_rails(view, i)
    out: list[tuple[str, ...]] = []
    if set(rails) <= set(free):
        out.append(rails)
        free = [r for r in free if r not in rails]
    while len(out) < members:
        take, free = tuple(free[:size]), free[size:]
        out.append(take if len(take) == size else ())
    return out[:members]
