"""What-if planning and read-only answers: ``railyard plan`` offline; PlanGang, ExplainPod,
/debug/gangs and WatchGangs on the live state (called under the service lock). Nothing here
reserves anything it does not give back.

Takes facts (``core.model``), never Kubernetes objects: callers translate at their door.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator, Sequence

from extender.core import verdicts
from extender.core.cluster.state import ClusterState, Reservation
from extender.core.cluster.topology import Topology
from extender.core.devices.facts import DraFacts
from extender.core.devices.ledger import DeviceLedger, problems as dra_problems
from extender.core.gangs import gangspec
from extender.core.gangs.lifecycle import HOLDING, RESERVED, Phase
from extender.core.model import Address, GangRef, GangSpec, GroupFacts, LevelChoice, NodeFacts, PodFacts
from extender.core.placement.address import addresses
from extender.core.placement.planner import NoPlacement, Placement, domain_fits, plan
from extender.service.answers import Explanation, GangAnswer, GangChange, GangView, Slices
from extender.service.context import Context
from extender.settings import DEFAULT_GPU_RESOURCE, GangSettings


def answer(state: ClusterState, result: Placement | NoPlacement, members: set[str], origin: str = "") -> GangAnswer:
    topo = state.topology
    if isinstance(result, NoPlacement):
        return GangAnswer(result.gang, False, None, None, {}, verdicts.explain_no_placement(topo, result),
                          origin=origin)
    return GangAnswer(
        gang=result.gang,
        feasible=True,
        level=topo.level_key(result.level),
        domain=tuple(result.domain.path),
        placement={s.member: s.node for s in result.slots if s.member in members},
        reason=verdicts.explain_placement(topo, result),
        ranks=tuple(a for a in addresses(topo, result) if a.pod in members),
        slices=slices_of(topo, result),
        origin=origin,
    )


def slices_of(topo: Topology, placement: Placement | None) -> Slices | None:
    rule = placement.slices if placement is not None else None
    if placement is None or rule is None:
        return None
    count = sum(1 for s in placement.slots if s.gpus > 0) // rule.size
    return Slices(rule.size, topo.level_key(rule.level), count)


def ranks_of(topo: Topology, placement: Placement | None, spec: GangSpec | None = None) -> tuple[Address, ...]:
    """The members' addresses; a replacement round's with their ranks in the whole gang (``spec``)."""
    return tuple(addresses(topo, placement, spec)) if placement is not None else ()


def by_gang(pods: Iterable[PodFacts]) -> dict[str, list[PodFacts]]:
    """Pods by gang key, gangs in order of first appearance."""
    gangs: dict[str, list[PodFacts]] = {}
    for pod in pods:
        gangs.setdefault(pod.gang.key, []).append(pod)
    return gangs


@dataclass
class WhatIf:
    """A cluster loaded from facts, ready to plan pending gangs in order."""

    state: ClusterState
    groups: dict[tuple[str, str], GroupFacts] = field(default_factory=dict)
    """By ``GroupFacts.id``; a gang reads the group its members' convention names."""
    problems: list[str] = field(default_factory=list)
    default_timeout: float = GangSettings().default_timeout_seconds
    devices: DeviceLedger = field(default_factory=lambda: DeviceLedger(DEFAULT_GPU_RESOURCE))

    @classmethod
    def load(cls, nodes: Sequence[NodeFacts], levels: LevelChoice, pods: Iterable[PodFacts] = (),
             groups: Iterable[GroupFacts] = (), dra: Iterable[DraFacts] = (),
             gpu_resource: str = DEFAULT_GPU_RESOURCE, rail_attribute: str = "") -> "WhatIf":
        """``dra``: DeviceClasses, ResourceSlices, ResourceClaims and templates; a node without
        allocatable GPUs gets its GPU devices, claims are usage, pods are sized by their claims;
        ``rail_attribute`` names each device's rail (``core.placement.rails``)."""
        state = ClusterState(levels.levels)
        problems = list(levels.problems)
        named = [n for n in nodes if n.name]
        if len(named) < len(nodes):
            problems.append(f"{len(nodes) - len(named)} node(s) without metadata.name were skipped")
        devices = DeviceLedger(gpu_resource, rail_attribute=rail_attribute)
        for facts in dra:
            devices.upserted(facts)
        state.set_nodes(devices.nodes_relisted(named))
        unknown_nodes = 0
        for pod in pods:
            pod, _ = devices.size(pod)
            usage = pod.usage
            if usage is None:
                continue
            if state.node(usage.node) is None:
                unknown_nodes += 1
            state.upsert_pod(usage)
        if unknown_nodes:
            problems.append(f"{unknown_nodes} pod(s) on nodes that are not in the node list were ignored")
        devices.apply_claims(state, list(devices.claims))
        problems.extend(state.topology.problems)
        problems.extend(dra_problems(devices))
        return cls(state, {g.id: g for g in groups}, problems, devices=devices)

    def plan_pending(self, pending: Iterable[PodFacts]) -> list[GangAnswer]:
        """Plan each gang in order of first appearance; each sees the ones before it reserved.
        A gang with a member whose claims railyard cannot size gets that reason."""
        answers = []
        for key, pods in by_gang(pending).items():
            sized = [self.devices.size(p) for p in pods]
            unsized = next((problem for _, problem in sized if problem), "")
            if unsized:
                answers.append(GangAnswer(key, False, None, None, {}, verdicts.not_sized(unsized)))
                continue
            members = [p for p, _ in sized]
            spec = gangspec.build(key, members, gangspec.group_of(self.groups, members[0]), self.default_timeout)
            result = plan(spec, self.state.view())
            answers.append(answer(self.state, result, {p.key for p in members}, origin(spec, members[0].gang)))
            if isinstance(result, Placement):
                self.state.reserve(Reservation(key, result.slots, math.inf))
        return answers


# -- the live state's read-only answers (under the service lock) --------------------------------


def plan_gangs(ctx: Context, pods: Sequence[PodFacts]) -> list[GangAnswer]:
    """What-if for the gangs of ``pods`` against the live state, each planned alone with its
    own reservation (if it holds one) given back."""
    answers = []
    gangs = ctx.settings.gangs
    for key, members in by_gang(pods).items():
        spec = gangspec.build(key, members, gangspec.group_of(ctx.groups, members[0]), gangs.default_timeout_seconds,
                              max_timeout=gangs.max_timeout_seconds, max_preferred_wait=gangs.max_preferred_wait_seconds)
        with own_reservation_returned(ctx.state, key):
            answers.append(answer(ctx.state, plan(spec, ctx.state.view()), {p.key for p in members},
                                  origin(spec, members[0].gang)))
    return answers


def debug_gangs(ctx: Context, now: float) -> list[GangView]:
    out = []
    topo = ctx.state.topology
    for rec in ctx.book.records():
        phase = rec.phase.value
        if rec.phase == Phase.WAITING:
            phase = f"waiting at bind {len(rec.waiting)}/{rec.min_member}"
        held = ctx.state.reservation(rec.key) if rec.phase in RESERVED else None
        slots = held.slots if held else rec.placement.slots if rec.placement else ()
        out.append(GangView(
            gang=rec.key,
            phase=phase,
            plan={s.member: s.node for s in slots},  # members that came later by name
            deadline_in_seconds=round(rec.deadline - now, 1) if rec.deadline and rec.phase in HOLDING else None,
            reason=rec.reason,
            slices=slices_of(topo, rec.placement),
            ranks=ranks_of(topo, rec.placement, rec.spec),
            origin=_gang_origin(ctx, rec.key),
        ))
    return out


def origin(spec: GangSpec, ref: GangRef) -> str:
    """Which workload a gang came from and where its size was read, e.g. ``JobSet ml/train
    attempt 1: size 32 from JobSet ml/train spec.replicatedJobs (workers 4 x 8 pods)``."""
    if not spec.size_from:
        return f"{ref.workload}: size not declared, the members seen ({len(spec.members)} now)" if ref.workload else ""
    size = f"size {spec.min_member} from {spec.size_from}"
    return f"{ref.workload}: {size}" if ref.workload else size


def _gang_origin(ctx: Context, key: str) -> str:
    pods = ctx.pods.pending_of(key) or ctx.pods.bound_pods(key)
    if not pods:
        return ""
    spec = gangspec.build(key, pods, gangspec.group_of(ctx.groups, pods[0]), ctx.settings.gangs.default_timeout_seconds)
    return origin(spec, pods[0].gang)


def explain(ctx: Context, pod_key: str, now: float) -> Explanation | None:
    """Why a pod waits: its gang's phase and reason, the plan, and how much of the gang each
    domain at the gang's bound level holds. The gang's own reservation is given back for the
    table, so it shows what the gang could get now. None: railyard never saw the pod.
    """
    pending = ctx.pods.pending_pod(pod_key)
    pod = pending or ctx.pods.seen_pod(pod_key) or ctx.pods.bound_named(pod_key)
    if pod is None:
        return None
    gang = pod.gang.key
    rec = ctx.book.get(gang) if pod.gang.named else None
    members = sorted(ctx.pods.pending_of(gang), key=lambda p: p.key)
    topo = ctx.state.topology
    out = Explanation(pod=pod_key, gang=gang, phase=Phase.PENDING.value if pending is not None else "bound",
                      reason="", plan={}, min_member=0, at_bind=0, deadline_in_seconds=0.0, pods=0, level="",
                      fit=(), slices=None, ranks=(), origin=_gang_origin(ctx, gang) if pod.gang.named else "")
    if rec is not None:
        holding = rec.phase in HOLDING
        out = replace(out, phase=rec.phase.value, reason=rec.reason, min_member=rec.min_member,
                      at_bind=len(rec.waiting))
        if rec.placement is not None and holding:
            out = replace(out, plan={s.member: s.node for s in rec.placement.slots})
        if rec.deadline is not None and holding:
            out = replace(out, deadline_in_seconds=round(max(rec.deadline - now, 0.0), 1))
        if rec.placement is not None and (holding or rec.phase == Phase.BOUND):
            # Held or bound: the addresses its members were (or will be) bound with.
            out = replace(out, slices=slices_of(topo, rec.placement), ranks=ranks_of(topo, rec.placement, rec.spec))
    if not members:
        return out
    gangs = ctx.settings.gangs
    spec = gangspec.build(gang, members, gangspec.group_of(ctx.groups, pod), gangs.default_timeout_seconds,
                          max_timeout=gangs.max_timeout_seconds, max_preferred_wait=gangs.max_preferred_wait_seconds)
    if rec is not None and rec.phase == Phase.PENDING:
        # A gang that waits to settle: say so with the numbers of now, not of its last filter.
        waiting = ctx.unsettled(spec, now)
        if waiting is not None:
            out = replace(out, reason=waiting)
    with own_reservation_returned(ctx.state, gang):
        bound_level, rows = domain_fits(spec, ctx.state.view())
        if rec is None:
            # Never filtered as a gang: say so, and what planning it now would give.
            now_plan = answer(ctx.state, plan(spec, ctx.state.view()), set()).reason
            filtered = ctx.pods.seen_pod(pod_key) is not None
            why = verdicts.names_no_gang(pod_key) if filtered else verdicts.never_filtered(pod_key)
            out = replace(out, reason=f"{why}; planned now: {now_plan}")
    slices = out.slices
    if slices is None and spec.slice_size and spec.slice_level is not None:
        asked = topo.level_index(spec.slice_level)
        count = sum(1 for gpus in spec.demand() if gpus > 0) // spec.slice_size
        slices = Slices(spec.slice_size, topo.level_key(asked) if asked is not None else spec.slice_level, count)
    return replace(out, pods=len(spec.demand()), level=topo.level_key(bound_level) or "", fit=tuple(rows),
                   slices=slices)


def watch(ctx: Context, sink: Callable[[GangChange], None]) -> tuple[list[GangChange], Callable[[], None]]:
    """Subscribe ``sink`` to gang phase changes (under the lock). Returns every gang as it is
    now (so nothing falls between the listing and the first change) and a function that
    unsubscribes. ``sink`` is called under the service lock: it must only enqueue. Each change
    carries its gang's origin (read only while someone watches)."""
    def told(change: GangChange) -> None:
        sink(replace(change, origin=_gang_origin(ctx, change.gang)))

    ctx.watchers.append(told)
    listing = [replace(GangChange.of(rec), origin=_gang_origin(ctx, rec.key)) for rec in ctx.book.records()]

    def unsubscribe() -> None:
        with ctx.cond:
            if told in ctx.watchers:
                ctx.watchers.remove(told)
    return listing, unsubscribe


@contextmanager
def own_reservation_returned(state: ClusterState, gang: str) -> Iterator[None]:
    """Plan as if ``gang`` held nothing; its reservation is restored exactly afterwards."""
    held = state.release(gang)
    try:
        yield
    finally:
        if held is not None:
            state.reserve(held)
