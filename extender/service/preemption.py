"""Gang-aware preemption, orchestrated: the choice is ``core.gangs.preemption``'s, the bookkeeping
the gang book's; this does the waiting and the Eviction API calls, outside the service lock.

    preempt verb, a gang member -> gang(): choose a domain and victims; release the lower-priority
                                   reservations in it; reserve the domain for the preemptor on
                                   the state without its victims; then, outside the lock, a dry-run
                                   eviction of every victim, and only if none is refused, the
                                   evictions (kube-scheduler is told to evict nothing itself)
    an eviction call that fails -> asked again (``EVICTION_ATTEMPTS``): a timeout or a 5xx is no
                                   refusal, and the call may have evicted the pod all the same
    an eviction refused (a PDB) -> the reservation goes, the pod is protected for
                                   ``preemption.blocked_seconds``, the gang chooses again at once
                                   (the next-best domain, or it waits with the reason)
    the victims terminate       -> gone(); the preemptor's members pass kube-scheduler's own
                                   filters on the freed nodes, filter steers them to their slots,
                                   bind binds the gang whole
    filter meanwhile            -> hold(): a member whose node still has a victim on it waits
                                   (that is no refusal of the node by kube-scheduler)

Events: ``Preempting`` on the preemptor's pods, ``Preempted`` on each victim,
``ReservationPreempted`` on the members of a gang whose reservation was released,
``PreemptionBlocked`` and ``CannotPreempt`` when it cannot go ahead, each with its numbers.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Sequence

from extender.core import verdicts
from extender.core.cluster.state import Slot
from extender.core.cluster.topology import Domain, format_path
from extender.core.gangs.record import GangRecord
from extender.core.gangs.lifecycle import HOLDING, RESERVED, Event, Phase
from extender.core.gangs.preemption import Choice, Held, NoChoice, choose, without
from extender.core.model import GangSpec, PodFacts
from extender.core.placement.homes import home_domains, home_nodes
from extender.core.verdicts import FilterVerdict
from extender.service.context import Context

Job = Callable[[], None]

log = logging.getLogger("railyard.preempt")

MAX_EVICTION_THREADS = 8
"""Eviction calls of one preemption in flight at once."""
EVICTION_ATTEMPTS = 3
EVICTION_RETRY_SECONDS = 1.0
"""An eviction call that fails (no answer, a 5xx) is made again this many times in all, this long
apart, before it counts as a refusal: taken for one, it would send the gang to another domain
and evict there too, while the pods of the first that were evicted are gone for nothing."""
RECHOOSE_SECONDS = 2.0
"""A gang that found nothing to preempt does not look again for this long: every member's
scheduling attempt asks, and a choice costs tens of milliseconds at thousands of nodes."""


@dataclass
class Preemption:
    """A gang clearing a domain: its choice, and what is needed to choose again."""

    choice: Choice
    spec: GangSpec
    members: tuple[PodFacts, ...]
    refused: tuple[str, ...]
    homes: tuple[Domain, ...]
    round: int
    nodes: frozenset[str]
    """Nodes of the domain where victims ran or released reservations held GPUs."""

    @property
    def victims(self) -> set[str]:
        return {v.uid or v.key for v in self.choice.evict}


class GangPreemption:
    def __init__(self, ctx: Context, run: Callable[[Job], None] | None = None) -> None:
        self.ctx = ctx
        self.settings = ctx.settings.preemption
        self.run = run or (lambda job: threading.Thread(target=job, name="railyard-evict", daemon=True).start())
        """Runs a job outside the lock: a thread of its own (tests run it inline)."""
        self.sleep: Callable[[float], None] = time.sleep
        """Waits between the attempts of an eviction call (outside the lock)."""
        self._active: dict[str, Preemption] = {}
        self._leaving: dict[str, float] = {}
        """uid -> when railyard evicted it; until the watch shows it gone (or it is forgotten)."""
        self._protected: dict[str, float] = {}
        """uid -> until when it is not chosen again (its eviction was refused)."""
        self._nothing: dict[str, float] = {}
        """gang -> until when it does not look again (it found nothing to preempt)."""

    # -- under the service lock --------------------------------------------------------------

    def member(self, rec: GangRecord, pod: PodFacts, now: float) -> list[Job]:
        """kube-scheduler asks to preempt for a gang member: a PENDING gang (a settled one)
        chooses; one planned, invalid or preempting already asks nothing."""
        if not self.settings.gangs or pod.gpus == 0:
            return []
        self.ctx.book.prepare(rec, pod.key)
        if rec.phase != Phase.PENDING:
            return []
        spec, members, running = self.ctx.request(rec, pod)
        if self.ctx.unsettled(spec, now):
            return []
        homes = home_domains(self.ctx.state.topology, spec, home_nodes(spec, [(p.key, p.node) for p in running]))
        jobs = self.gang(rec, spec, members, sorted(rec.refused), homes, now)
        self.ctx.cond.notify_all()
        return jobs

    def gang(self, rec: GangRecord, spec: GangSpec, members: Sequence[PodFacts], refused: Sequence[str],
             homes: Sequence[Domain], now: float) -> list[Job]:
        """A member of a PENDING gang asked for preemption: choose and reserve; the returned
        jobs (the Eviction API calls) are run outside the lock with ``start``."""
        current = self._active.get(rec.key)
        if current is not None and self._current(current):
            return []
        self._active.pop(rec.key, None)
        self._forget(now)
        if self._nothing.get(rec.key, 0.0) > now:
            return []
        held = [Held(g, self._priority(g, highest=True), r.slots) for g, r in self.ctx.state.reservations().items()
                if not r.bound and g != rec.key and (hr := self.ctx.book.get(g)) is not None and hr.phase in RESERVED]
        choice = choose(spec, self.ctx.state.view(), members, self.ctx.pods.on_node, self.ctx.pods.bound_pods, held,
                        protected=set(self._protected), leaving=set(self._leaving), refused=refused, homes=homes)
        if isinstance(choice, NoChoice):
            self._nothing[rec.key] = now + RECHOOSE_SECONDS
            log.info("%s", verdicts.cut(choice.reason))  # it quotes names pods were given
            self._tell(members, "CannotPreempt", choice.reason)
            return []
        return self._take(rec, spec, members, refused, homes, choice, now)

    def hold(self, rec: GangRecord, pod: PodFacts, names: Sequence[str]) -> FilterVerdict | None:
        """A member filtered before its planned node is free waits: kube-scheduler's own filters
        leave the node out while a pod railyard evicted is on it, and for a moment after railyard
        saw it go (the scheduler's cache is a separate watch). That is no refusal of the node."""
        slot = self.ctx.book.seat(rec, pod)
        if slot is None or slot.node in names or rec.phase not in HOLDING:
            return None
        p = self.active(rec.key)
        cleared = p is not None and slot.node in p.nodes
        here = [uid for uid in self.ctx.pods.on_node(slot.node) if uid in self._leaving
                or (p is not None and uid in p.victims)]
        if not here and not cleared:
            return None
        reason = verdicts.victims_leaving(rec.key, slot.node, pod.key, len(here))
        return FilterVerdict((), {n: reason for n in names})

    def gone(self, uid: str) -> None:
        """The watch shows the pod deleted or finished."""
        self._leaving.pop(uid, None)

    def relisted(self, uids: set[str]) -> None:
        """After a relist of the pods: every leaving pod not listed is gone."""
        self._leaving = {u: t for u, t in self._leaving.items() if u in uids}

    def active(self, gang: str) -> Preemption | None:
        p = self._active.get(gang)
        return p if p is not None and self._current(p) else None

    # -- outside the lock ----------------------------------------------------------------------

    def start(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            self.run(partial(_logged, job))

    # -- internals -----------------------------------------------------------------------------

    def _take(self, rec: GangRecord, spec: GangSpec, members: Sequence[PodFacts], refused: Sequence[str],
              homes: Sequence[Domain], choice: Choice, now: float) -> list[Job]:
        word = self.ctx.state.topology.level_word(choice.domain.level)
        where = format_path(choice.domain.path)
        for gang in choice.release:
            victim = self.ctx.book.get(gang)
            if victim is None or victim.phase not in RESERVED:
                continue
            reason = verdicts.reservation_preempted(gang, self._priority(gang, highest=True), rec.key,
                                                    choice.priority, word, where)
            self.ctx.book.unreserve(victim, Event.PREEMPTED, reason)
            self._active.pop(gang, None)
            self._tell(self.ctx.pods.pending_of(gang), "ReservationPreempted", reason)
        self.ctx.cond.notify_all()  # bind calls held for a released gang end now
        leaving = [pod for uid in self._leaving if (pod := self.ctx.pods.running_pod(uid)) is not None]
        view = without(self.ctx.state.view(), [*choice.evict, *leaving])
        timeout = spec.timeout_seconds + self.settings.victim_wait_seconds
        cap = self.ctx.settings.gangs.max_timeout_seconds  # kube-scheduler cuts a held bind at its httpTimeout
        waited = replace(spec, timeout_seconds=min(timeout, cap) if cap else timeout)
        self.ctx.book.reserve(rec, waited, now, refused, [choice.domain], view=view)
        if rec.phase not in HOLDING:  # the planner disagrees with the choice: evict nothing
            self._tell(members, "CannotPreempt", f"{choice.reason}; not started: {rec.reason}")
            return []
        self.ctx.book.preempts(rec, choice.reason)
        log.info("%s (round %d)", verdicts.cut(choice.reason), rec.round)
        topo, dom = self.ctx.state.topology, choice.domain
        nodes = frozenset(topo.names[i] for u in choice.units for i, _, _ in u.frees if dom.start <= i < dom.end)
        p = Preemption(choice, spec, tuple(members), tuple(refused), tuple(homes), rec.round, nodes)
        self._active[rec.key] = p
        if not choice.evict:
            self._tell(members, "Preempting", choice.reason, "Normal")
            return []
        return [lambda: self._evict(p)]

    def _evict(self, p: Preemption) -> None:
        """Ask for every victim first (dry run), then evict them all; a refusal chooses again."""
        victims = p.choice.evict
        refusals = self._ask(victims, dry_run=True)
        with self.ctx.cond:
            if not self._current(p):
                return
            if refusals:
                jobs = self._refused(p, refusals)
            else:
                self._tell(p.members, "Preempting", p.choice.reason, "Normal")
                jobs = None
        if jobs is not None:
            self.start(jobs)
            return
        refusals = self._ask(victims, dry_run=False)
        with self.ctx.cond:
            now = self.ctx.clock()
            word = self.ctx.state.topology.level_word(p.choice.domain.level)
            where = format_path(p.choice.domain.path)
            for v in victims:
                if v.key not in refusals:
                    self._leaving[v.uid or v.key] = now
                    whole = v.gang.key if v.gang.named and len(self.ctx.pods.bound_uids(v.gang.key)) > 1 else None
                    self.ctx.ports.events.event(v, "Preempted", verdicts.preempted_pod(
                        v.key, v.priority, p.choice.gang, p.choice.priority, word, where, whole), "Normal")
            jobs = self._refused(p, refusals) if refusals and self._current(p) else []
            if not refusals:
                log.info("gang %s: %d pods evicted, waiting for them to terminate", p.choice.gang, len(victims))
        self.start(jobs)

    def _ask(self, victims: Sequence[PodFacts], dry_run: bool) -> dict[str, str]:
        """pod key -> why its eviction was refused (or failed every attempt), for the victims that were."""
        def one(v: PodFacts) -> str | None:
            attempt = 1
            while True:
                try:
                    return self.ctx.ports.evictions.evict(v.ref, dry_run=dry_run)
                except Exception as exc:  # the binder's errors carry the API server's words
                    if attempt == EVICTION_ATTEMPTS:
                        return f"{exc} (tried {attempt} times)"
                    log.warning("evicting %s failed (attempt %d of %d, dry run: %s), asking again in %gs: %s",
                                v.key, attempt, EVICTION_ATTEMPTS, dry_run, EVICTION_RETRY_SECONDS, exc)
                    attempt += 1
                    self.sleep(EVICTION_RETRY_SECONDS)

        with ThreadPoolExecutor(max_workers=max(1, min(MAX_EVICTION_THREADS, len(victims)))) as pool:
            answers = list(pool.map(one, victims))
        return {v.key: a for v, a in zip(victims, answers) if a}

    def _refused(self, p: Preemption, refusals: dict[str, str]) -> list[Job]:
        """Protect the refused pods for a while, give the domain back, choose again."""
        now = self.ctx.clock()
        by_key = {v.key: v for v in p.choice.evict}
        for key in refusals:
            self._protected[by_key[key].uid or key] = now + self.settings.blocked_seconds
        reason = verdicts.eviction_blocked(p.choice.gang, refusals, self.settings.blocked_seconds)
        log.info("%s", verdicts.cut(reason))
        self._tell(p.members, "PreemptionBlocked", reason)
        rec = self.ctx.book.get(p.choice.gang)
        self._active.pop(p.choice.gang, None)
        if rec is None:
            return []
        self.ctx.book.unreserve(rec, Event.RETRY, reason)
        self.ctx.cond.notify_all()
        return self.gang(rec, p.spec, p.members, p.refused, p.homes, now)

    def _current(self, p: Preemption) -> bool:
        rec = self.ctx.book.get(p.choice.gang)
        return (self._active.get(p.choice.gang) is p and rec is not None and rec.round == p.round
                and rec.phase in HOLDING)

    def _forget(self, now: float) -> None:
        self._protected = {u: t for u, t in self._protected.items() if t > now}
        self._nothing = {g: t for g, t in self._nothing.items() if t > now}
        wait = self.settings.victim_wait_seconds
        self._leaving = {u: t for u, t in self._leaving.items() if now - t < wait}

    def _priority(self, gang: str, highest: bool = False) -> int:
        """A reserved gang's priority from its pending members: the highest protects it from
        preemption, the lowest is what it preempts with."""
        priorities = [p.priority for p in self.ctx.pods.pending_of(gang)]
        return (max if highest else min)(priorities, default=0)

    def _tell(self, pods: Sequence[PodFacts], reason: str, message: str, type_: str = "Warning") -> None:
        for pod in pods:
            self.ctx.ports.events.event(pod, reason, message, type_)


def _logged(job: Job) -> None:
    """Run a job; a bug in it is logged (its gang's reservation then ends at its deadline)."""
    try:
        job()
    except Exception:
        log.exception("preemption job failed")
