"""The cache sink: what the watch cache delivers (from its threads), applied to the core under
the service lock, the DRA kinds included; and what depends on it: readiness, level detection,
and the sizing of pods by their claims (``core.devices.ledger``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

from extender.core import verdicts
from extender.core.devices import ledger
from extender.core.devices.facts import ClaimFacts, ClaimTemplateFacts, DeviceClassFacts, DraFacts, SliceFacts
from extender.core.devices.ledger import Changes
from extender.core.errors import NotReady
from extender.core.gangs.lifecycle import RESERVED, Event
from extender.core.model import GangRef, GangSpec, GroupFacts, NodeFacts, PodFacts
from extender.service.context import Context
from extender.service.preemption import GangPreemption

if TYPE_CHECKING:
    from extender.service.release import GangRelease

KINDS = ("nodes", "pods", "podgroups")
"""What the watch cache lists before railyard plans a gang, unless told otherwise (``kinds``):
nodes, pods, and each kind of group object (opaque names; ``GroupFacts.kind``), and the DRA
kinds (``DRA_KINDS``) where the watch cache lists them."""
DRA_KINDS = {"deviceclasses": DeviceClassFacts, "resourceslices": SliceFacts, "resourceclaims": ClaimFacts,
             "resourceclaimtemplates": ClaimTemplateFacts}


class CacheSink:
    def __init__(self, ctx: Context, preemption: GangPreemption, kinds: Sequence[str] = KINDS) -> None:
        self.ctx = ctx
        self.preemption = preemption
        """Told when pods go, so it stops waiting for the victims it evicted."""
        self.kinds = tuple(kinds)
        self._schemes: frozenset[str] = frozenset()
        self.levels_stale = False
        """A node carries labels of a preset not seen before: detect the levels again (``redetect``)."""
        self._synced: frozenset[str] = frozenset()
        """Replaced, never changed: ``ready`` reads it without the lock."""
        self.release: GangRelease | None = None
        """Told of gated gang members and of freed GPUs (``service.release``)."""

    def ready(self) -> bool:
        # No lock: /readyz answers while a long call (a relist, a large PlanGang) holds it.
        return set(self.kinds) <= self._synced

    def still_listing(self, gang: str) -> str:
        return verdicts.still_listing(sorted(set(self.kinds) - self._synced), gang)

    # -- nodes, pods and groups --------------------------------------------------------------

    def node_upserted(self, node: NodeFacts) -> None:
        with self.ctx.cond:
            self._put_node(self.ctx.devices.node_seen(node))

    def _put_node(self, node: NodeFacts) -> None:
        ctx = self.ctx
        if ctx.fixed_levels is None and not ctx.ports.scheme.schemes_of(node) <= self._schemes:
            self.levels_stale = True
        old = ctx.state.node(node.name)
        ctx.state.upsert_node(node)
        if self.release is not None and old != node:
            self.release.freed()
        if old is not None and (old.unschedulable, old.ready, old.taints) != (node.unschedulable, node.ready,
                                                                               node.taints):
            if ctx.book.node_changed(node):  # a planned node no longer takes its members
                ctx.changed()

    def node_deleted(self, name: str) -> None:
        ctx = self.ctx
        with ctx.cond:
            ctx.devices.node_gone(name)
            ctx.state.delete_node(name)
            if ctx.book.node_deleted(name):
                ctx.changed()

    def pod_upserted(self, pod: PodFacts) -> None:
        ctx = self.ctx
        with ctx.cond:
            ledger.pod_changed(ctx.devices, ctx.pods, ctx.state, pod)
            ctx.shown(pod)
            ctx.rounds.changed(pod, ctx.clock())
            ctx.arrivals.noted(pod, ctx.pods, ctx.clock())
            if self.release is not None:
                self.release.pod_seen(pod)

    def pod_deleted(self, pod: PodFacts) -> None:
        ctx = self.ctx
        with ctx.cond:
            ledger.pod_deleted(ctx.devices, ctx.pods, ctx.state, pod)
            ctx.rounds.gone(pod)
            self.preemption.gone(pod.uid or pod.key)
            ctx.arrivals.noted(pod, ctx.pods, ctx.clock())
            if pod.gang.named and ctx.book.member_deleted(pod.gang.key, pod.key):
                ctx.changed()
            if self.release is not None:
                self.release.pod_gone(pod)

    def group_upserted(self, group: GroupFacts) -> None:
        ctx = self.ctx
        with ctx.cond:
            old = ctx.groups.get(group.id)
            ctx.groups[group.id] = group
            if old is not None and (old.declarations, old.problems) == (group.declarations, group.problems):
                return
            # A gang planned before its group object was seen (its watch lags the pods'), or
            # planned by one it since changed: held to the old request (a leader waiting at bind
            # for workers its controller makes only after it, a size too small) until its
            # timeout. Planned again now instead.
            changed = False
            for rec in ctx.book.records():
                pod = next((p for p in ctx.pods.pending_of(rec.key) if p.gang.group_id == group.id), None) \
                    if rec.phase in RESERVED and rec.spec is not None else None
                if pod is None or rec.spec is None:
                    continue
                spec, _, _ = ctx.request(rec, pod)
                if _asks(spec) != _asks(rec.spec):
                    reason = verdicts.group_changed(rec.key, group.key, rec.spec.min_member, spec.min_member,
                                                    rec.spec.lead_size, spec.lead_size)
                    ctx.book.unreserve(rec, Event.RETRY, reason)
                    changed = True
            if changed:
                ctx.changed()

    def group_deleted(self, group: GroupFacts) -> None:
        with self.ctx.cond:
            self.ctx.groups.pop(group.id, None)

    def relisted(self, kind: str, objects: Sequence[NodeFacts | PodFacts | GroupFacts | DraFacts]) -> None:
        ctx = self.ctx
        with ctx.cond:
            if kind == "nodes":
                ctx.state.set_nodes(ctx.devices.nodes_relisted(o for o in objects if isinstance(o, NodeFacts)))
                self.redetect(force=True)
            elif kind == "pods":
                pods = [p for p in objects if isinstance(p, PodFacts)]
                before = ctx.pods.uids()
                ledger.pods_relisted(ctx.devices, ctx.pods, ctx.state, pods)
                ctx.rounds.clear()
                for pod in pods:
                    ctx.shown(pod)
                    ctx.rounds.changed(pod, ctx.clock())
                listed = {p.key for p in pods}
                ctx.state.drop_bound_slots_except(listed)
                self.preemption.relisted({p.uid or p.key for p in pods})
                ctx.arrivals.prune(ctx.pods.has_pending)
                # A member deleted while the watch was down sent no delete event: the relist
                # is the only news of it (not listed, or listed under another uid: recreated
                # under its name). Its gang is planned again now, as pod_deleted would, not
                # held for the missing member until its deadline.
                uids = {p.key: p.uid for p in pods}
                lost = {k for k, uid in before.items() if uids.get(k) not in (None, "", uid)}
                released = False
                for rec in ctx.book.records():
                    gone = next((m for m in rec.members if m not in listed or m in lost), None)
                    if gone is not None and ctx.book.member_deleted(rec.key, gone):
                        released = True
                if released:
                    ctx.changed()
                if self.release is not None:
                    self.release.relisted(pods)
            elif kind in DRA_KINDS:
                dra = [o for o in objects if isinstance(o, (DeviceClassFacts, SliceFacts, ClaimFacts, ClaimTemplateFacts))]
                self._dra_changed(ctx.devices.relisted(DRA_KINDS[kind], dra))
            else:  # one kind of group object
                ctx.groups = {i: g for i, g in ctx.groups.items() if i[0] != kind}
                ctx.groups.update((g.id, g) for g in objects if isinstance(g, GroupFacts))
            self._synced |= {kind}

    def redetect(self, force: bool = False) -> None:
        """Detect the levels again (under the lock): always with ``force``, else only when a
        node brought labels of a preset not seen before."""
        ctx = self.ctx
        if ctx.fixed_levels is not None:
            levels = ctx.fixed_levels
        elif force or self.levels_stale:
            nodes = ctx.state.nodes()
            levels = ctx.ports.scheme.detect(nodes).levels
            self._schemes = frozenset(s for n in nodes for s in ctx.ports.scheme.schemes_of(n))
            self.levels_stale = False
        else:
            return
        ctx.state.set_levels(levels)

    # -- DRA ------------------------------------------------------------------------------------

    def dra_upserted(self, facts: DraFacts) -> None:
        ctx = self.ctx
        with ctx.cond:
            self._dra_changed(ctx.devices.upserted(facts))
            # A gang released at bind leaves no claim allocated to a member that was not bound
            # (kube-scheduler's Unreserve keeps it, pinning the next attempt: docs/dra.md).
            leftover = ctx.devices.leftover(facts.key, lambda p: ctx.pods.seen_pod(p) is not None) \
                if isinstance(facts, ClaimFacts) else None
            if leftover is not None:
                namespace, name = leftover.key.split("/", 1)
                ctx.ports.claims.deallocate_claim(namespace, name, leftover.uid, leftover.resource_version)

    def dra_deleted(self, facts: DraFacts) -> None:
        with self.ctx.cond:
            self._dra_changed(self.ctx.devices.deleted(facts))

    def _dra_changed(self, changes: Changes) -> None:
        ctx = self.ctx
        for node in ledger.dra_changed(ctx.devices, ctx.pods, ctx.state, changes):
            self._put_node(node)

    def sized(self, pod: PodFacts, filtering: bool = False) -> PodFacts:
        """The pod with the GPUs of its claims; one railyard cannot size is left to
        kube-scheduler (a pod of no gang and no GPUs to railyard), with the reason in an Event."""
        if not pod.claims:
            return pod
        ctx = self.ctx
        with ctx.cond:
            if filtering and pod.gang.named and not self.ready():
                raise NotReady(self.still_listing(pod.gang.key))
            sized, problem = ctx.devices.size(pod)
        if not problem:
            return sized
        if filtering:
            ctx.ports.events.event(pod, "GPUsNotSized", verdicts.not_sized(problem))
        return replace(pod, gang=GangRef(pod.key, False), gpus=0)


def _asks(spec: GangSpec) -> tuple[object, ...]:
    """What a gang's plan follows from its request (not its members, not its timeout)."""
    return (spec.min_member, spec.lead_size, spec.required, spec.preferred, spec.slice_size, spec.slice_level,
            spec.exclusive, spec.invalid)
