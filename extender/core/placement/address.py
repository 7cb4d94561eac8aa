"""Where each member of a planned gang sits: its rank, its slice, its domain at every level, and
the rails planned for its GPUs when the gang is rail-aligned (``rails``).

A pure function of the plan (the values, ``model.Address`` and ``model.Place``, are facts like
any other). The rank is the member's place in the order the planner gave slots in (rank index
labels, then name; members not created yet last), which it laid out depth-first, so
consecutive ranks are neighbours in the fabric; the slice is rank // slice size. The gate
writes it on each member with its Binding round (``model.BindingMark``) before any Binding; a
training launcher reads it from the pod (``kubeobjects.notes`` names the annotations) to build
its process groups: ranks that follow the fabric.

A round of replacements for a running gang is planned on its own, so its members get their
domains but no rank or slice: their place in the whole gang is not the plan's to say.
"""

from __future__ import annotations

from extender.core.model import OTHER_FABRIC, Address, Place
from extender.core.placement.planner import Placement
from extender.core.cluster.topology import Topology, format_path


def addresses(topo: Topology, placement: Placement) -> list[Address]:
    """The address of every GPU member, in rank order."""
    ranked = placement.home is None
    size = placement.slices.size if placement.slices is not None and ranked else 0
    out = []
    for rank, slot in enumerate(s for s in placement.slots if s.gpus > 0):
        out.append(Address(slot.member, slot.node, rank if ranked else None, rank // size if size else None,
                           domains(topo, slot.node), slot.rails))
    return out


def domains(topo: Topology, node: str) -> tuple[Place, ...]:
    i = topo.index.get(node)
    if i is None:
        return ()
    out = []
    for lvl, level in enumerate(topo.levels):
        d = topo.node_domain[lvl][i]
        if topo.paths[lvl][d][-1] not in (None, OTHER_FABRIC):
            out.append(Place(level.key, topo.level_word(lvl), format_path(topo.domain(lvl, d).path)))
    return tuple(out)


def gang_addresses(topo: Topology, placement: Placement | None) -> dict[str, Address]:
    """Per member of a planned gang, its address (written on its pod before it is bound)."""
    return {a.pod: a for a in addresses(topo, placement)} if placement is not None else {}
