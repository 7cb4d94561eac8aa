"""Where each member of a planned gang sits: its rank, its slice, and its domain at every level.

A pure function of the plan. The rank is the member's place in the order the planner gave
slots in (rank index labels, then name; members not created yet last), which it laid out
depth-first, so consecutive ranks are neighbours in the fabric; the slice is rank // slice
size. A training launcher reads them from the pod (``kubeobjects.notes`` names the
annotations) to build its process groups: ranks that follow the fabric.

A round of replacements for a running gang is planned on its own, so its members get their
domains but no rank or slice: their place in the whole gang is not the plan's to say.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.core.planner import Placement
from extender.core.topology import Topology, format_path
from extender.core.verdicts import level_word


@dataclass(frozen=True)
class Place:
    """A member's domain at one level."""

    level: str
    """The level's key (a node label key)."""
    name: str
    """The level's short name (``leaf``, ``nvlink``...), else the last part of its key."""
    domain: str
    """The domain's whole path from the broadest level, ``s1/l2``: a value repeated under two
    parents is two domains."""


@dataclass(frozen=True)
class Address:
    pod: str
    """``<namespace>/<name>``; ``<gang>#<n>`` for a member not created yet."""
    node: str
    rank: int | None
    slice: int | None
    """None when the gang is not sliced (and for replacements)."""
    domains: tuple[Place, ...]
    """Broadest first; a level whose label the node lacks is left out."""


@dataclass(frozen=True)
class PodNotes:
    """What railyard writes on a gang member as it binds it (adapters make annotations of it)."""

    address: Address | None = None


def addresses(topo: Topology, placement: Placement) -> list[Address]:
    """The address of every GPU member, in rank order."""
    ranked = placement.home is None
    size = placement.slices.size if placement.slices is not None and ranked else 0
    out = []
    for rank, slot in enumerate(s for s in placement.slots if s.gpus > 0):
        out.append(Address(slot.member, slot.node, rank if ranked else None, rank // size if size else None,
                           domains(topo, slot.node)))
    return out


def domains(topo: Topology, node: str) -> tuple[Place, ...]:
    i = topo.index.get(node)
    if i is None:
        return ()
    out = []
    for lvl, level in enumerate(topo.levels):
        path = topo.paths[lvl][topo.node_domain[lvl][i]]
        if path[-1] is not None:
            out.append(Place(level.key, level_word(topo, lvl), format_path(path)))
    return tuple(out)


def gang_notes(topo: Topology, placement: Placement | None) -> dict[str, PodNotes]:
    """Per member of a planned gang, what to write on it as it is bound."""
    return {a.pod: PodNotes(a) for a in addresses(topo, placement)} if placement is not None else {}
