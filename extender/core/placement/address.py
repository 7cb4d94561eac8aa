"""Where each member of a planned gang sits: its rank, its slice, its domain at every level, and
the rails planned for its GPUs when the gang is rail-aligned (``rails``).

A pure function of the plan (the values, ``model.Address`` and ``model.Place``, are facts like
any other). The rank is the member's place in the order the planner gave slots in, which it
laid out depth-first, so consecutive ranks are neighbours in the fabric: by rank index labels,
then name; while members are missing, each where its workload numbers it
(``packing.position``, ``packing.seats``: a Job's completion index, a JobSet's (Job,
completion index), a LeaderWorkerSet's worker index), so a member created after the plan is
told its workload's rank too; the slice is rank // slice size. The gate writes it on each
member with its Binding round (``model.BindingMark``) before any Binding; a training launcher
reads it from the pod (``kubeobjects.notes`` names the annotations) to build
its process groups: ranks that follow the fabric.

A round of replacements for a running gang is planned on its own, beside the running members;
each of its members gets its rank in the whole gang (``whole_ranks``: the running members keep the
ranks railyard told them and the new ones take the ranks none holds, so a replacement takes the
lost member's rank), the slice of that rank, and its own domains and the rails
its own plan gave it: the gang's rail set, read back from the rails railyard told the running
members (``GangSpec.rail_set``), on a node where it is free when its home domain has one
(``rails.align``), else the node's lowest free rails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from extender.core.model import OTHER_FABRIC, Address, GangSpec, Member, Place
from extender.core.placement.packing import position, rank_order
from extender.core.cluster.topology import Topology, format_path

if TYPE_CHECKING:
    from extender.core.placement.planner import Placement


def addresses(topo: Topology, placement: Placement, spec: GangSpec | None = None) -> list[Address]:
    """The address of every GPU member, in rank order; for a round beside running members
    (``spec.ranks``), each with its rank in the whole gang."""
    given = dict(spec.ranks) if spec is not None and spec.ranks else None
    size = (spec.gang_slice_size if spec is not None else 0) if given is not None else \
        placement.slices.size if placement.slices is not None else 0
    out = []
    for n, slot in enumerate(s for s in placement.slots if s.gpus > 0):
        rank = n if given is None else given.get(slot.member)
        out.append(Address(slot.member, slot.node, rank, rank // size if size and rank is not None else None,
                           domains(topo, slot.node), slot.rails))
    return out


def whole_ranks(running: Sequence[tuple[Member, int | None]], members: Sequence[Member],
                size: int) -> tuple[tuple[str, int], ...]:
    """Each GPU member's rank in the whole gang of ``size``: the running members keep the ranks
    railyard told them (``running``: each with its told rank), and the new ones take the ranks no
    running member holds, lowest first, in rank index label order, so one replacement takes the
    rank of the member it replaces. Where the running members' told ranks are missing or clash:
    every member by rank index labels (none last), then name, as the planner gives a first
    round's slots (``packing.rank_order``)."""
    gpu_running = [(m, r) for m, r in running if m.gpus > 0]
    new = rank_order([m for m in members if m.gpus > 0])
    told = [r for _, r in gpu_running]
    if all(r is not None for r in told) and len(set(told)) == len(told):
        taken = {r for r in told if r is not None}
        total = max(size, len(told) + len(new), max(taken, default=-1) + 1)
        free = [r for r in range(total) if r not in taken]
        return (*((m.key, r) for m, r in gpu_running if r is not None), *((m.key, r) for m, r in zip(new, free)))
    everyone = rank_order([m for m, _ in gpu_running] + new)
    return tuple((m.key, r) for r, m in enumerate(everyone))


def kept_seat(placement: Placement | None, spec: GangSpec | None, rank: tuple[int, ...] | None) -> str | None:
    """The slot ``packing.seats`` kept for a member created after the plan, at its workload's place
    (its placeholder's name), while it is still free; None: it takes any free one."""
    if placement is None or spec is None or spec.ranks or placement.slices is not None:
        return None
    p = position(rank, spec.rank_layout)
    gpu = [s for s in placement.slots if s.gpus > 0]
    if p is None or not 0 <= p < len(gpu) or not gpu[p].member.startswith(f"{placement.gang}#"):
        return None
    return gpu[p].member


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


def gang_addresses(topo: Topology, placement: Placement | None, spec: GangSpec | None = None) -> dict[str, Address]:
    """Per member of a planned gang, its address (written on its pod before it is bound)."""
    return {a.pod: a for a in addresses(topo, placement, spec)} if placement is not None else {}
