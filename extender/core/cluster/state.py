"""Counters over the static tree: free GPUs per node, node blocks, and gang reservations.

One pod or node change updates a counter in O(1); only a change to the node set or to a node's
topology path starts a new ``Topology`` generation (built lazily, on the next read).

free[i]  = allocatable GPUs - GPU requests of pods on the node that are not Succeeded/Failed
           - GPUs reserved for planned gangs on the node
taken[i] = the same for every other resource (cpu, memory, pods, ...), as a mapping
held[i]  = the exclusive gang whose claimed domain holds the node (``claims``), only such nodes

Not thread-safe: the service serialises access.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import AbstractSet, Iterable, Mapping

from extender.core.model import Level, NodeFacts, PodUsage, Resources, Taint
from extender.core.cluster.claims import Claims, Hold
from extender.core.cluster.topology import Topology

CORDONED = "cordoned"
NOT_READY = "not ready"


@dataclass(frozen=True)
class Slot:
    """One member's place in a gang's reservation."""

    member: str
    node: str
    gpus: int
    requests: Resources = ()
    """The member's other requests, reserved with its GPUs."""
    rails: tuple[str, ...] = ()
    """The rails planned for its GPUs, one device each (``core.placement.rails``), reserved with them."""
    part: int | None = None
    """A slot of a member not created yet in an exclusive slice: only a member of that part
    (``PodFacts.part``) may claim it (``claim_slot``)."""


@dataclass(frozen=True)
class Reservation:
    gang: str
    slots: tuple[Slot, ...]
    deadline: float
    bound: bool = False
    """Slots of a round railyard has bound: kept until the watch shows each pod bound (its
    usage then counts instead) or deleted, so no other gang is planned onto them meanwhile."""

    @property
    def gpus(self) -> int:
        return sum(s.gpus for s in self.slots)


@dataclass(frozen=True)
class View:
    """What the planner reads: a live view of the state's counters, not a copy. Valid until
    the state next changes; treat every list as read-only."""

    topology: Topology
    free: list[int]
    blocked: list[str | None]
    """Per node index: why the node takes no placements (cordoned, not ready), or None."""
    taints: Mapping[int, tuple[Taint, ...]]
    """Nodes with NoSchedule/NoExecute taints."""
    reserved: list[int]
    """GPUs reserved for gangs, per node index (already subtracted from ``free``)."""
    by_free: Mapping[int, set[int]]
    """Unblocked node indexes grouped by free GPUs, for best-fit single-pod placement."""
    allocatable: list[Mapping[str, int]]
    """Per node index, the allocatable amount of every other resource."""
    taken: list[Mapping[str, int]]
    """Per node index, how much of each other resource pods and reservations take."""
    labels_generation: int
    """Changes whenever any node's labels, taints or the node set change (eligibility caches)."""
    masks: dict[tuple[object, ...], list[bool]]
    """Eligibility masks by (labels_generation, selector...): memo of ``eligibility.label_mask``."""
    blocked_nodes: AbstractSet[int]
    """Indexes of the nodes whose ``blocked`` is set: a single pod's filter looks only at these
    and the reserved nodes, not at every name (issue 13)."""
    reserved_nodes: Mapping[str, int]
    """GPUs reserved for gangs, per node name, only nodes with a reservation."""
    reserved_rails: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Per node name, devices reserved per rail (slots that name rails), only such nodes."""
    held: Mapping[int, Hold] = field(default_factory=dict)
    """Per node index, the exclusive gang's claim that holds it, only such nodes."""


class ClusterState:
    def __init__(self, levels: Iterable[Level] = ()):
        self._levels: tuple[Level, ...] = tuple(levels)
        self._nodes: dict[str, NodeFacts] = {}
        self._pods: dict[str, PodUsage] = {}
        self._used: dict[str, int] = {}
        self._reservations: dict[str, Reservation] = {}
        self._reserved_by_member: dict[str, tuple[str, Slot]] = {}
        self._emptied: list[str] = []
        """Gangs whose reservation lost its last slot to a member (``take_emptied``)."""
        self._reserved: dict[str, int] = {}
        self._reserved_rails: dict[str, dict[str, int]] = {}
        self._topology: Topology | None = None
        self._taken: dict[str, dict[str, int]] = {}
        self._labels_generation = 0
        self._masks: dict[tuple[object, ...], list[bool]] = {}
        # Per-generation counter arrays, valid when self._topology is not None.
        self._free: list[int] = []
        self._blocked: list[str | None] = []
        self._blocked_set: set[int] = set()
        self._taints: dict[int, tuple[Taint, ...]] = {}
        self._reserved_arr: list[int] = []
        self._by_free: dict[int, set[int]] = {}
        self._alloc_arr: list[Mapping[str, int]] = []
        self._taken_arr: list[Mapping[str, int]] = []
        self.claims = Claims()
        """Domains exclusive gangs hold (``core.cluster.claims``)."""
        self._writes = 0

    @property
    def writes(self) -> int:
        """A count that moves whenever anything a plan reads changes: nodes, pods holding GPUs,
        reservations, claims. Equal counts: a plan made again would see the same cluster."""
        return self._writes + self.claims.writes

    # -- nodes ------------------------------------------------------------------------------

    @property
    def levels(self) -> tuple[Level, ...]:
        return self._levels

    def set_levels(self, levels: Iterable[Level]) -> None:
        """Replace the level list (every node's path follows from its labels)."""
        self._levels = tuple(levels)
        self._topology = None
        self._writes += 1

    def set_nodes(self, nodes: Iterable[NodeFacts]) -> None:
        """Replace every node (a relist)."""
        self._nodes = {n.name: n for n in nodes}
        self._topology = None
        self._labels_generation += 1
        self._writes += 1

    def nodes(self) -> list[NodeFacts]:
        return list(self._nodes.values())

    def upsert_node(self, node: NodeFacts) -> None:
        old = self._nodes.get(node.name)
        if old == node:
            return
        self._nodes[node.name] = node
        self._writes += 1
        if old is None or old.labels != node.labels or old.taints != node.taints:
            self._labels_generation += 1
        if old is None or self._topology is None or old.path(self._levels) != node.path(self._levels):
            self._topology = None  # new generation
            return
        self._topology.renew(node)  # labels the levels do not read, GPUs, resources
        self._refresh_node(self._topology.index[node.name], node)

    def delete_node(self, name: str) -> None:
        if self._nodes.pop(name, None) is not None:
            self._topology = None
            self._labels_generation += 1
            self._writes += 1

    def node(self, name: str) -> NodeFacts | None:
        return self._nodes.get(name)

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    # -- pods -------------------------------------------------------------------------------

    def upsert_pod(self, usage: PodUsage, member_key: str | None = None) -> None:
        """Record a pod holding GPUs. If it fills a reserved slot, the slot is consumed."""
        old = self._pods.get(usage.uid)
        if old == usage:
            return
        if old is not None:
            self._add_used(old.node, -old.gpus)
            self._add_taken(old.node, old.requests, -1)
        self._pods[usage.uid] = usage
        self._add_used(usage.node, usage.gpus)
        self._add_taken(usage.node, usage.requests, 1)
        if member_key is not None:
            held = self._reserved_by_member.get(member_key)
            if held is not None and held[1].node == usage.node:
                self._drop_slot(member_key)

    def delete_pod(self, uid: str) -> None:
        old = self._pods.pop(uid, None)
        if old is not None:
            self._add_used(old.node, -old.gpus)
            self._add_taken(old.node, old.requests, -1)

    def drop_slot(self, member_key: str) -> None:
        """The member is gone: the slot it held (if any) is free again."""
        if member_key in self._reserved_by_member:
            self._drop_slot(member_key)

    def drop_bound_slots_except(self, members: set[str]) -> None:
        """After a relist of pods: bound rounds' slots of pods that no longer exist are free."""
        for res in [r for r in self._reservations.values() if r.bound]:
            for slot in res.slots:
                if slot.member not in members:
                    self._drop_slot(slot.member)

    def pod(self, uid: str) -> PodUsage | None:
        return self._pods.get(uid)

    def pod_uids(self) -> list[str]:
        return list(self._pods)

    # -- reservations -----------------------------------------------------------------------

    def reserve(self, reservation: Reservation) -> None:
        if reservation.gang in self._reservations:
            raise ValueError(f"gang {reservation.gang} already holds a reservation")
        for slot in reservation.slots:
            if slot.member in self._reserved_by_member:
                # A member holds one slot at a time: a new round's plan replaces the slot an
                # earlier round kept for it (a pod recreated under the same name).
                self._drop_slot(slot.member)
        self._reservations[reservation.gang] = reservation
        for slot in reservation.slots:
            self._reserved_by_member[slot.member] = (reservation.gang, slot)
            self._add_reserved(slot.node, slot.gpus)
            self._add_taken(slot.node, slot.requests, 1)
            self._add_rails(slot, 1)

    def release(self, gang: str) -> Reservation | None:
        """Give back every GPU still held for the gang."""
        res = self._reservations.pop(gang, None)
        if res is None:
            return None
        for slot in res.slots:
            if self._reserved_by_member.get(slot.member, (None,))[0] == gang:
                del self._reserved_by_member[slot.member]
                self._add_reserved(slot.node, -slot.gpus)
                self._add_taken(slot.node, slot.requests, -1)
                self._add_rails(slot, -1)
        return res

    def reservation(self, gang: str) -> Reservation | None:
        return self._reservations.get(gang)

    def reservations(self) -> Mapping[str, Reservation]:
        return self._reservations

    def slot_of(self, member_key: str) -> Slot | None:
        held = self._reserved_by_member.get(member_key)
        return held[1] if held else None

    def slot_gang(self, member_key: str) -> str | None:
        """The gang whose reservation holds the member's slot (not always the pod's own gang
        now: a filter call may have named the same pod with another group since)."""
        held = self._reserved_by_member.get(member_key)
        return held[0] if held else None

    def rename_slot(self, gang: str, old: str, new: str) -> None:
        res = self._reservations[gang]
        slots = tuple(replace(s, member=new) if s.member == old else s for s in res.slots)
        self._reservations[gang] = Reservation(gang, slots, res.deadline, res.bound)
        _, slot = self._reserved_by_member.pop(old)
        self._reserved_by_member[new] = (gang, replace(slot, member=new))

    def expired(self, now: float) -> list[str]:
        return [g for g, r in self._reservations.items() if r.deadline <= now and not r.bound]

    def _drop_slot(self, member_key: str) -> None:
        gang, slot = self._reserved_by_member.pop(member_key)
        self._add_reserved(slot.node, -slot.gpus)
        self._add_taken(slot.node, slot.requests, -1)
        self._add_rails(slot, -1)
        res = self._reservations[gang]
        rest = tuple(s for s in res.slots if s.member != member_key)
        if rest:
            self._reservations[gang] = Reservation(gang, rest, res.deadline, res.bound)
        else:
            del self._reservations[gang]
            if not res.bound:
                self._emptied.append(gang)

    def take_emptied(self) -> list[str]:
        """The gangs whose reservation lost its last slot since the last call (a member bound
        on it outside railyard's gate, deleted, or planned with another gang): nothing of their
        plan is held any more, so no deadline of theirs will pass (``GangBook.expire``)."""
        emptied, self._emptied = self._emptied, []
        return emptied

    # -- snapshot ---------------------------------------------------------------------------

    @property
    def topology(self) -> Topology:
        if self._topology is None:
            self._rebuild()
        assert self._topology is not None
        return self._topology

    def view(self) -> View:
        topo = self.topology
        return View(topo, self._free, self._blocked, self._taints, self._reserved_arr, self._by_free,
                    self._alloc_arr, self._taken_arr, self._labels_generation, self._masks,
                    self._blocked_set, self._reserved, self._reserved_rails, self.claims.held(topo))

    def free(self, node: str) -> int:
        n = self._nodes.get(node)
        if n is None:
            return 0
        return n.gpus - self._used.get(node, 0) - self._reserved.get(node, 0)

    def used(self) -> Mapping[str, int]:
        """GPUs pods hold, per node name (only nodes with some); live: copy it to keep it."""
        return self._used

    def taken(self, node: str) -> Mapping[str, int]:
        """How much of every non-GPU resource pods and reservations take on the node."""
        return self._taken.get(node, {})

    def _rebuild(self) -> None:
        topo = Topology(self._levels, list(self._nodes.values()))
        self._topology = topo
        size = len(topo.names)
        self._free = [0] * size
        self._blocked = [None] * size
        self._blocked_set = set()
        self._reserved_arr = [0] * size
        self._taints = {}
        self._by_free = {}
        self._alloc_arr = [{}] * size
        self._taken_arr = [self._taken.setdefault(name, {}) for name in topo.names]
        for i, node in enumerate(topo.nodes):
            self._reserved_arr[i] = self._reserved.get(node.name, 0)
            self._refresh_node(i, self._nodes[node.name])

    def _refresh_node(self, i: int, node: NodeFacts) -> None:
        blocked = CORDONED if node.unschedulable else NOT_READY if not node.ready else None
        taints = tuple(t for t in node.taints if t.effect in ("NoSchedule", "NoExecute"))
        if taints:
            self._taints[i] = taints
        else:
            self._taints.pop(i, None)
        self._index_out(i)
        self._blocked[i] = blocked
        if blocked is None:
            self._blocked_set.discard(i)
        else:
            self._blocked_set.add(i)
        self._free[i] = node.gpus - self._used.get(node.name, 0) - self._reserved.get(node.name, 0)
        self._alloc_arr[i] = dict(node.allocatable)
        self._index_in(i)

    def _add_taken(self, node: str, requests: Resources, sign: int) -> None:
        if not requests:
            return
        taken = self._taken.setdefault(node, {})  # the same dict the view's list holds
        for name, amount in requests:
            taken[name] = taken.get(name, 0) + sign * amount

    def _add_used(self, node: str, delta: int) -> None:
        self._writes += 1
        self._used[node] = self._used.get(node, 0) + delta
        if not self._used[node]:
            del self._used[node]
        self._shift_free(node, -delta)

    def _add_rails(self, slot: Slot, sign: int) -> None:
        if not slot.rails:
            return
        rails = self._reserved_rails.setdefault(slot.node, {})
        for rail in slot.rails:
            rails[rail] = rails.get(rail, 0) + sign
            if not rails[rail]:
                del rails[rail]
        if not rails:
            del self._reserved_rails[slot.node]

    def _add_reserved(self, node: str, delta: int) -> None:
        self._writes += 1
        self._reserved[node] = self._reserved.get(node, 0) + delta
        if not self._reserved[node]:
            del self._reserved[node]
        if self._topology is not None and node in self._topology.index:
            self._reserved_arr[self._topology.index[node]] += delta
        self._shift_free(node, -delta)

    def _shift_free(self, node: str, delta: int) -> None:
        if self._topology is None:
            return
        i = self._topology.index.get(node)
        if i is None:
            return
        self._index_out(i)
        self._free[i] += delta
        self._index_in(i)

    def _index_out(self, i: int) -> None:
        if self._blocked[i] is None:
            bucket = self._by_free.get(self._free[i])
            if bucket is not None:
                bucket.discard(i)

    def _index_in(self, i: int) -> None:
        if self._blocked[i] is None and self._free[i] > 0:
            self._by_free.setdefault(self._free[i], set()).add(i)


def claimable(state: ClusterState, gang: str, gpus: int, part: int | None = None,
              prefer: str | None = None) -> Slot | None:
    """The slot reserved for missing members that a member created after planning would claim
    (of its part, when the slot is an exclusive slice's), ``prefer`` first when it is one."""
    res = state.reservation(gang)
    if res is None:
        return None
    preferred = [s for s in res.slots if s.member == prefer] if prefer is not None else []
    return next((s for s in (*preferred, *res.slots)
                 if s.member.startswith(f"{gang}#") and s.gpus == gpus and s.part in (None, part)), None)


def claim_slot(state: ClusterState, gang: str, member: str, gpus: int, part: int | None = None,
               prefer: str | None = None) -> str | None:
    """Give ``member`` the slot ``claimable`` names; the placeholder name it took, or None."""
    slot = claimable(state, gang, gpus, part, prefer)
    if slot is None:
        return None
    state.rename_slot(gang, slot.member, member)
    return slot.member


def keep_bound(state: ClusterState, gang: str, members: set[str], key: str) -> tuple[Slot, ...]:
    """Move the slots of the gang's members railyard bound to a reservation of their own
    (``key``, held until the watch shows each pod bound or deleted, so that a next round of the
    gang, filtered before the watch caught up, can plan); the slots left to the gang."""
    held = state.release(gang)
    if held is None:
        return ()
    bound = tuple(s for s in held.slots if s.member in members)
    rest = tuple(s for s in held.slots if s.member not in members)
    if bound:
        state.reserve(Reservation(key, bound, math.inf, bound=True))
    if rest:
        state.reserve(Reservation(gang, rest, held.deadline))
    return rest
