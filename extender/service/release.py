"""Gang members released whole: railyard's scheduling gate lifted for every member of a gang at
once, each first nominated to its planned node (issue 21 items 3 and 4).

The admission policy (``adapters/kubeobjects/admission``) creates every gang member that asks
for GPUs with the gate ``railyard.io/gang``: kube-scheduler keeps it out of its active queue
and tries it not once until the gate goes. From the watch, railyard plans such a gang as its
filter would (the same reservation, every node a candidate); once it holds a plan, each member's
``status.nominatedNodeName`` names its planned node and then its gate is lifted. kube-scheduler
records a nominated pod, gated or not, and counts it on its node for every pod of equal or lower
priority it filters (``PriorityQueue.addPod``, pkg/scheduler/backend/queue/scheduling_queue.go;
``addGENominatedPods``, pkg/scheduler/framework/runtime/framework.go; kubernetes v1.37.2): pods
of no gang, which no longer reach railyard's filter, keep off the reserved GPUs. It tries the
nominated node first (``evaluateNominatedNode``, schedule_one.go), which the filter passes.

A gang is planned at its first gated member, as at its first filter call before (a member
created later takes its slot then and is released at once, nominated to it), once no other component's
scheduling gate is left on its members (Kueue lifts its own once it admits the workload). A
member not created yet has no nomination: its slot is railyard's alone, and a lone pod may take
it; the late member's planned node is then refused by kube-scheduler and the gang planned again.
A gang that cannot be planned stays gated, holding nothing, with the reason in an Event; if it
may preempt, railyard's preemption chooses its victims as kube-scheduler's preempt call would
have it do. It is tried again when pods finish or go, nodes change, or its size settles. A gang
that starves (``core.gangs.starvation``) holds the GPUs of its drain as they free up: each gated
member is nominated to its drain slot's node, gate kept, so that lone pods, which do not reach
railyard's filter, keep off those GPUs too (kube-scheduler counts a gated pod's nomination:
``PriorityQueue.addPod`` and ``Update``, scheduling_queue.go).

Orchestration only: the book plans; the writes go through the Gates port, outside the lock.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Protocol

from extender.core import verdicts
from extender.core.errors import Preferring, Settling
from extender.core.gangs.record import GangRecord
from extender.core.gangs.lifecycle import HOLDING, Phase
from extender.core.gangs.starvation import DRAIN
from extender.core.model import PodFacts, PodRef
from extender.service.context import Context, per_pod
from extender.service.preemption import GangPreemption, Job

log = logging.getLogger("railyard.release")

Reserve = Callable[[GangRecord, PodFacts, list[str], float], bool]
SWEEP_SECONDS = 0.5
"""The most often every gated gang is tried again after GPUs freed (each plan is made under the
service lock, taken for one gang at a time, which filter and bind calls wait for; a gang the free
GPUs cannot hold keeps its last plan's answer, ``GangBook.reserve``); a new gated member is looked
at at once."""


class Cache(Protocol):
    """What a pass needs of the cache sink (``sink.CacheSink``, which tells this module of pods)."""

    levels_stale: bool

    def ready(self) -> bool: ...
    def redetect(self, force: bool = False) -> None: ...


class GangRelease:
    def __init__(self, ctx: Context, sink: Cache, preemption: GangPreemption, reserve: Reserve) -> None:
        self.ctx = ctx
        self.sink = sink
        self.preemption = preemption
        self.reserve = reserve
        """``Verbs.reserve``: the plan filter would make."""
        self._gated: dict[str, dict[str, PodRef]] = {}
        """gang -> its members the watch shows gated, by key (under ``ctx.cond``)."""
        self._strays: dict[str, tuple[PodRef, str]] = {}
        """Gated pods to release at the next pass, with the node to name: releases whose write
        failed, and pods railyard holds no gang for, no node named (a field the API server
        dropped after admission, such as ``spec.schedulingGroup`` with its feature gate off;
        labels changed since; a pod railyard cannot size)."""
        self._nominated: dict[str, str] = {}
        """Gated member -> the drain node railyard nominated it to (written, or being written)."""
        self._draining = False
        """A gated gang held a drain at the last pass: its nominations may have to move."""
        self._due: set[str] = set()
        """Gangs to try at the next pass: a gated member arrived."""
        self._retry = False
        """GPUs freed or nodes changed since the last sweep: every gated gang is tried again."""
        self._timers: dict[str, float] = {}
        """Gang -> when (``ctx.clock``) to try it again though nothing changed: a gang left
        unplaced starves at its bound, and its drain lapses unless the gang asks again within it
        (kube-scheduler's retries ask for a gang that reaches the filter; a gated one has none)."""
        self._swept = float("-inf")
        self._wake = threading.Event()

    @property
    def active(self) -> bool:
        return self.ctx.ports.gates is not None

    # -- from the cache sink, under the lock -----------------------------------------------------

    def pod_seen(self, pod: PodFacts) -> None:
        gang = pod.gang.key
        if pod.gated and not pod.node and not pod.finished:
            if pod.gang.named:
                self._gated.setdefault(gang, {})[pod.key] = pod.ref
                self._due.add(gang)
            else:
                self._strays[pod.key] = (pod.ref, "")
            self._wake.set()
            return
        self._forget(gang, pod.key)
        if pod.node and pod.finished:
            self.freed()

    def pod_gone(self, pod: PodFacts) -> None:
        self._forget(pod.gang.key, pod.key)
        self.freed()

    def freed(self) -> None:
        """GPUs or nodes changed: gangs left gated may fit now."""
        if self._gated:
            self._retry = True
            self._wake.set()

    def relisted(self, pods: list[PodFacts]) -> None:
        self._gated.clear()
        self._timers.clear()
        self._strays.clear()
        self._nominated.clear()
        for pod in pods:
            self.pod_seen(pod)
        self.freed()

    def _forget(self, gang: str, key: str) -> None:
        self._strays.pop(key, None)
        self._nominated.pop(key, None)
        members = self._gated.get(gang)
        if members is not None:
            members.pop(key, None)
            if not members:
                del self._gated[gang]
                self._timers.pop(gang, None)

    # -- the release pass (its own thread) -------------------------------------------------------

    def run(self, wait: float) -> int:
        """Wait up to ``wait`` seconds for something to do, then plan the gangs that are due and
        release the planned ones; returns how many members were released."""
        ctx = self.ctx
        if self._retry or self._draining:
            wait = min(wait, SWEEP_SECONDS)  # a drain may have moved or a plan on it gone: nominations follow
        if self._timers:
            wait = max(0.0, min(wait, min(self._timers.values()) - ctx.clock()))
        self._wake.wait(wait)
        self._wake.clear()
        if not self.active:
            return 0
        jobs: list[Job] = []
        with ctx.cond:
            if not (self._gated or self._strays) or not self.sink.ready():
                return 0
            if self.sink.levels_stale:
                self.sink.redetect()
            now = ctx.tick()
            sweep = self._retry and now - self._swept >= SWEEP_SECONDS
            timed = {g for g, at in self._timers.items() if at <= now}
            for gang in timed:
                del self._timers[gang]
            gangs = set(self._gated) if sweep else (self._due | timed) & set(self._gated)
            self._due.clear()
            if sweep:
                self._retry, self._swept = False, now
            lifts: list[tuple[PodRef, str]] = list(self._strays.values())
            self._strays.clear()
        for gang in sorted(gangs):
            # The lock one gang at a time: a filter or bind call waits for one plan, not a sweep's.
            with ctx.cond:
                released, job, acted = self._decide(gang, now)
                if acted:
                    ctx.changed()
            lifts += released
            jobs += job
            time.sleep(0)  # a thread waiting for the lock takes it now
        with ctx.cond:
            nominations = self._drain_nominations()
        self.preemption.start(jobs)
        assert ctx.ports.gates is not None
        if nominations:
            failed = {k for k, e in per_pod(ctx.ports.gates.nominate_all, nominations).items() if e is not None}
            if failed:
                log.warning("nominating %d gated members to their drain's nodes failed (%s); trying again",
                            len(failed), ", ".join(sorted(failed)[:5]))
                with ctx.cond:
                    for key in failed:
                        self._nominated.pop(key, None)
                    self._retry = True
        if not lifts:
            return 0
        errors = {k: e for k, e in per_pod(ctx.ports.gates.release_all, lifts).items() if e is not None}
        for key, exc in errors.items():
            log.warning("%s", exc)
        if errors:
            with ctx.cond:  # tried again at the next pass, a second later
                for ref, node in lifts:
                    if ref.key in errors:
                        self._strays[ref.key] = (ref, node)
        return len(lifts) - len(errors)

    def _time(self, rec: GangRecord, now: float) -> None:
        """When to try an unplaced gang again if nothing changes before: at its starvation bound,
        then (draining) every half bound, so its drain is asked for again before it lapses."""
        bound = self.ctx.book.starvation_seconds
        if not bound or rec.unplaced_since is None:
            return
        at = rec.unplaced_since + bound
        self._timers[rec.key] = at if at > now else now + max(bound / 2, SWEEP_SECONDS)

    def _drain_nominations(self) -> list[tuple[PodRef, str]]:
        """Each gated member of a starving gang with its drain slot's node, where railyard has not
        nominated it there yet; a member nominated to a node its drain no longer holds, with the
        node it holds now or none (the nomination moves or is cleared). Every gated gang, each pass:
        a drain moves or goes without its gang being tried (an older starving gang's drain takes
        its nodes, it lapses), and kube-scheduler keeps counting a stale nomination, so a gang
        planned on those nodes would find them full (the ``gangs`` run of 2026-12-07: released
        members waited up to their 60 s timeout). Nor is a member nominated to a node where
        another gang's plan holds GPUs: a drain may hold them for when that gang is done, but
        kube-scheduler would count the drain's member there before the planned one (the next run:
        a younger gang's drain over 16 of a released 128-pod gang's nodes kept those 16 members
        from ever reaching railyard); the planned members' own nominations keep lone pods off.
        Written before this pass's releases."""
        out = []
        reservations = self.ctx.state.reservations()
        planned = {s.node: g for g, r in reservations.items() if not r.bound and not g.endswith(DRAIN)
                   for s in r.slots if s.gpus}
        self._draining = False
        for gang, members in self._gated.items():
            drain = reservations.get(gang + DRAIN)
            self._draining |= drain is not None
            nodes = {s.member.removesuffix(DRAIN): s.node for s in drain.slots} if drain is not None else {}
            for key, ref in members.items():
                node = nodes.get(key, "")
                if planned.get(node, gang) != gang:
                    node = ""
                if self._nominated.get(key, "") != node:
                    self._nominated[key] = node
                    out.append((ref, node))
        return out

    def _decide(self, gang: str, now: float) -> tuple[list[tuple[PodRef, str]], list[Job], bool]:
        """The gang's gated members to release, each with its planned node, the preemption jobs
        to start, and whether the book may have changed (bind calls then look again); plans the
        gang first if it has no plan."""
        ctx = self.ctx
        gated = self._gated.get(gang, {})
        members = sorted((p for k in gated if (p := ctx.pods.pending_pod(k)) is not None and p.gated),
                         key=lambda p: p.key)
        for key in set(gated) - {p.key for p in members}:  # left to kube-scheduler (unsized)
            self._strays[key] = (gated.pop(key), "")
            self._wake.set()
        if not members:
            self._gated.pop(gang, None)
            self._timers.pop(gang, None)
            return [], [], False
        held = [p for p in members if p.held_by]
        if held:
            # Another component decides first (Kueue admits by quota, then lifts its gate): a
            # plan now would hold GPUs for a gang that may wait on it for long.
            gates = sorted({g for p in held for g in p.held_by})
            reason = verdicts.held_by_others(gang, len(held), len(members), gates)
            for pod in members:
                ctx.ports.events.event(pod, "GangWaiting", reason, "Normal")
            return [], [], False
        rec = ctx.book.record(gang, now)
        first = members[0]
        ctx.book.prepare(rec, first.key)
        jobs: list[Job] = []
        if rec.phase == Phase.PENDING:
            try:
                planned = self.reserve(rec, first, list(ctx.state.topology.names), now)
            except Settling:
                self._retry = True  # its size settles with time: the next pass looks again
                for pod in members:
                    ctx.ports.events.event(pod, "GangWaiting", rec.reason, "Normal")
                return [], [], True
            except Preferring:
                # It waits for a domain of its preferred level, holding nothing (``reserve`` said
                # so in a GangPreferring Event): a domain freeing or its wait ending, the next
                # passes look again.
                self._retry = True
                return [], [], True
            if not planned:
                # Its last plan, which found no room, stands (nothing it reads changed, or no
                # domain has the GPUs at all): its reason was told, its victims looked for then.
                self._time(rec, now)
                return [], [], False
            if rec.phase == Phase.PENDING:
                jobs = self.preemption.member(rec, first, now)
        if rec.phase not in HOLDING:
            for pod in members:
                ctx.ports.events.event(pod, "GangUnschedulable", rec.reason)
            self._time(rec, now)
            return [], jobs, True
        del self._gated[gang]
        self._timers.pop(gang, None)
        out = []
        names = list(ctx.state.topology.names)
        for pod in members:
            if ctx.state.slot_of(pod.key) is None:
                ctx.book.steer(rec, pod, names)  # a member created after planning takes its slot, as at filter
            slot = ctx.state.slot_of(pod.key)
            out.append((pod.ref, slot.node if slot is not None else ""))
        return out, jobs, True
