"""kube-scheduler's verbs: filter, prioritize, preempt, and bind (held at the gang's permit
gate). Orchestration only: what to do is decided in the core (``gangs.book`` for gangs,
``lone`` for pods of no gang, ``gangs.preemption`` for a gang's victims).
"""

from __future__ import annotations

import time
from typing import Any, Coroutine

from extender.core.errors import NotReady, Preferring, Settling
from extender.core.gangs.record import GangRecord
from extender.core.gangs.lifecycle import HOLDING, Phase
from extender.core.lone import best_fit_scores, filter_single, filter_unreadable, planned_scores, vet_victims
from extender.core.model import PodFacts
from extender.core.placement.homes import home_domains, home_nodes
from extender.core.verdicts import FilterVerdict
from extender.service.context import Context
from extender.service.gate import PermitGate
from extender.service.preemption import GangPreemption, Job
from extender.service.recovery import Recovery
from extender.service.sink import CacheSink


class Verbs:
    def __init__(self, ctx: Context, sink: CacheSink, gate: PermitGate, preemption: GangPreemption,
                 recovery: Recovery) -> None:
        self.ctx = ctx
        self.sink = sink
        self.gate = gate
        self.preemption = preemption
        self.recovery = recovery

    def filter(self, pod: PodFacts, node_names: list[str]) -> FilterVerdict:
        ctx = self.ctx
        pod = self.sink.sized(pod, filtering=True)
        if pod.problems and (pod.gpus == 0 or not pod.gang.named):
            # Unreadable values (GPUs "abc" or "500m" are not 0 GPUs): nowhere, with the reason.
            # A GPU member's problems are its gang's reason, below.
            return filter_unreadable(pod.key, pod.problems, node_names)
        if pod.gpus == 0:
            with ctx.cond:  # without managedResources (DRA claims) every pod comes: bind must know it
                ctx.pods.filtered(pod, ctx.tick())
            return FilterVerdict(tuple(node_names))
        self.recovery.run()
        with ctx.cond:
            now = ctx.tick()
            if self.sink.levels_stale:
                self.sink.redetect()
            if pod.gang.named and not self.sink.ready():
                # Serving starts before the lists finish (a restart, kill -9 included): a plan
                # made on nodes without their pods would promise GPUs that are in use.
                raise NotReady(self.sink.still_listing(pod.gang.key))
            ctx.pods.filtered(pod, now)
            ctx.arrivals.noted(pod, ctx.pods, now)
            if not pod.gang.named:
                return filter_single(ctx.state.view(), pod.gpus, node_names)
            rec = ctx.book.record(pod.gang.key, now)
            round_ = rec.round
            ctx.book.prepare(rec, pod.key)
            waiting = self.preemption.hold(rec, pod, node_names)
            if waiting is not None:
                return waiting
            for _ in range(2):  # a plan whose node the scheduler refuses is made again at once
                if rec.phase == Phase.PENDING:
                    self.reserve(rec, pod, node_names, now)
                before = rec.round
                verdict = ctx.book.steer(rec, pod, node_names)
                if rec.round == before:
                    break
            jobs: list[Job] = []
            if pod.gang.pod_group_cycle and rec.phase == Phase.PENDING:
                # No preempt call will come for it (a pod-group cycle): railyard's own choice now.
                jobs = self.preemption.member(rec, pod, now)
            if rec.phase not in HOLDING and not ctx.pods.unshown_pod(pod.key):
                # Events only about pods the watch shows: a pod that exists nowhere else (a
                # client naming pods at will) costs the API server nothing.
                ctx.ports.events.event(pod, "GangUnschedulable", rec.reason)
            ctx.changed(wake=rec.round != round_)
        self.preemption.start(jobs)
        return verdict

    def filter_now(self, pod: PodFacts, node_names: list[str]) -> FilterVerdict | None:
        """``filter`` if it can answer without waiting, else None: the service lock is held
        elsewhere (a watch event, a relist, a PlanGang), or a partly bound round is due for
        recovery (Bindings over the network). The HTTP server answers on its event loop with
        it and sends only the None cases to a thread (issue 21 item 5: no thread hop per call)."""
        ctx = self.ctx
        if not ctx.cond.acquire(blocking=False):
            return None
        try:  # held across filter (re-entrant): nothing can make recovery due in between
            return None if ctx.rounds.any_partial() else self.filter(pod, node_names)
        finally:
            ctx.cond.release()

    def reserve(self, rec: GangRecord, pod: PodFacts, node_names: list[str], now: float) -> bool:
        """Plan a PENDING gang for ``pod`` among ``node_names`` (what kube-scheduler sent; every
        node when ``service.release`` plans a gated gang), or raise Settling. False: its last
        plan, which found no room, stands (``GangBook.reserve``)."""
        ctx = self.ctx
        spec, _, running = ctx.request(rec, pod)
        wait = ctx.unsettled(spec, now)
        if wait is not None:
            ctx.book.unsettled(rec, wait)
            raise Settling(wait)
        started = time.perf_counter()
        topo = ctx.state.topology
        # kube-scheduler's verdict as evidence: the names it sends passed its own filters for
        # this pod (all feasible nodes with percentageOfNodesToScore: 100), so a node it left out
        # fails something railyard does not model (host ports, volumes, pod affinity...).
        sent = set(node_names)
        refused = [n for n in topo.names if n not in sent] if len(sent) < len(topo.names) else []
        homes = home_domains(topo, spec, home_nodes(spec, [(p.key, p.node) for p in running]))
        planned = ctx.book.reserve(rec, spec, now, refused, homes)
        if planned:
            ctx.ports.observer.plan_seconds(time.perf_counter() - started)
        if rec.preferring_until is not None:
            if not ctx.pods.unshown_pod(pod.key):
                ctx.ports.events.event(pod, "GangPreferring", rec.reason, "Normal")
            raise Preferring(rec.reason)
        return planned

    def prioritize(self, pod: PodFacts, node_names: list[str]) -> list[tuple[str, int]]:
        ctx = self.ctx
        pod = self.sink.sized(pod)
        with ctx.cond:
            slot = ctx.state.slot_of(pod.key)
            if slot is not None:
                return planned_scores(slot.node, node_names)
            if pod.gpus == 0:
                return []  # every host 0: unlisted hosts score 0
            return best_fit_scores(ctx.state.view(), pod.gpus, node_names)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.recovery.run()
        self.gate.bind(namespace, name, uid, node)

    def bind_now(self, namespace: str, name: str, uid: str, node: str) -> Coroutine[Any, Any, None] | None:
        """``bind`` of a pod bound alone, as a coroutine, or None (``PermitGate.bind_now``)."""
        return self.gate.bind_now(namespace, name, uid, node)

    def preempt(self, pod: PodFacts, victims: dict[str, list[str]]) -> dict[str, list[str]]:
        """A pod of no gang: kube-scheduler's victims, vetoed where they would break a running
        gang. A gang member: railyard chooses and evicts (``preemption``); the scheduler is told
        to evict nothing (an empty reply), so its per-pod choices never scatter evictions."""
        ctx = self.ctx
        pod = self.sink.sized(pod)
        with ctx.cond:
            if not pod.gang.named:
                return vet_victims(ctx.state, pod.gpus, ctx.state.slot_of(pod.key), victims,
                                   ctx.pods.bound_gang_of, ctx.pods.bound_uids)
            now = ctx.tick()
            jobs = self.preemption.member(ctx.book.record(pod.gang.key, now), pod, now) if self.sink.ready() else []
        self.preemption.start(jobs)
        return {}
