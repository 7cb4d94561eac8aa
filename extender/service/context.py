"""What every part of the service shares: one lock around the core's state, the ports, the
settings and the clock, and the few things every part does with them.

Each part (``sink``, ``verbs``, ``gate``, ``preemption``, ``recovery``, ``whatif``) holds this
one object: it reads and changes the core's objects under ``cond``, calls ``tick`` for the
time it decides at and ``changed`` after the gang book changed. None reaches into another's
private state.
"""

from __future__ import annotations

import threading
from typing import Callable, Sequence, TypeVar

from extender.core import verdicts
from extender.core.cluster.pods import PodIndex
from extender.core.cluster.state import ClusterState
from extender.core.devices.ledger import DeviceLedger
from extender.core.gangs import gangspec, settle
from extender.core.gangs.book import GangBook, Notice
from extender.core.gangs.record import GangRecord
from extender.core.gangs.lifecycle import Event, Phase
from extender.core.gangs.recovery import Rounds
from extender.core.model import GangSpec, GroupFacts, PodFacts, PodRef
from extender.core.ports import Ports
from extender.service.answers import GangChange
from extender.settings import Settings

T = TypeVar("T")

MAX_UNTOLD_PER_POD = 8
"""Notices kept for a pod the watch has not shown yet; later ones are not told."""


class Context:
    def __init__(self, settings: Settings, ports: Ports, clock: Callable[[], float],
                 sleep: Callable[[float], None]) -> None:
        self.settings = settings
        self.ports = ports
        self.clock = clock
        self.sleep = sleep
        self.cond = threading.Condition(threading.RLock())
        """The one lock around everything below; held bind calls wait on it."""
        fixed = ports.scheme.explicit(settings.placement.levels) if settings.placement.levels else None
        self.fixed_levels = fixed.levels if fixed else None
        """The levels the settings name; None: detected from the nodes' labels."""
        self.state = ClusterState(self.fixed_levels or ())
        self.book = GangBook(self.state, ports.observer, on_step=self._publish,
                             starvation_seconds=settings.gangs.starvation_seconds,
                             drain_patience_seconds=settings.gangs.max_preferred_wait_seconds)
        self.pods = PodIndex()
        self.groups: dict[tuple[str, str], GroupFacts] = {}
        """By ``GroupFacts.id``: a pod reads the group its own convention names."""
        self.arrivals = settle.Arrivals()
        self.rounds = Rounds()
        self.devices = DeviceLedger(settings.placement.gpu_resource, settings.dra.device_classes,
                                    settings.dra.rail_attribute, settings.topology_attributes())
        self._untold: dict[str, list[Notice]] = {}
        """Notices for pods the watch had not shown yet, by pod key (``shown`` sends them)."""
        self.watchers: list[Callable[[GangChange], None]] = []
        """WatchGangs subscribers; each is called under the lock and must only enqueue."""

    def changed(self, wake: bool = True) -> None:
        """After the gang book changed (under the lock): its notices go out as Events on the
        pods they concern (only pods the watch shows; never blocks), and with ``wake`` every
        bind call waiting on the lock looks again."""
        for notice in self.book.take_notices():
            for key in notice.members:
                pod = self.pods.pending_pod(key) or self.pods.seen_pod(key) or self.pods.bound_named(key)
                if pod is None:
                    continue
                if not self.pods.unshown_pod(key):
                    self._tell(pod, notice)
                else:  # known from filter alone so far (the watch lags): told once the watch shows it
                    self._untold_notice(key, notice)
        if wake:
            self.cond.notify_all()

    def _untold_notice(self, key: str, notice: Notice) -> None:
        told = self._untold.setdefault(key, [])
        if len(told) < MAX_UNTOLD_PER_POD:
            told.append(notice)
        if len(self._untold) > self.pods.max_unshown:  # bounded as the unshown pods are
            for stale in [k for k in self._untold if not self.pods.unshown_pod(k)]:
                del self._untold[stale]

    def shown(self, pod: PodFacts) -> None:
        """The watch showed ``pod`` (under the lock): the notices it missed while only filter
        knew it go out now."""
        if self._untold:
            for notice in self._untold.pop(pod.key, ()):
                self._tell(pod, notice)

    def _tell(self, pod: PodFacts, notice: Notice) -> None:
        self.ports.events.event(pod, notice.reason, notice.message, "Warning" if notice.warning else "Normal")

    def tick(self) -> float:
        """Now, with time applied (under the lock): expired deadlines end their rounds; pods
        only filter has seen, past their time or the bounds, are forgotten as if deleted;
        exclusive gangs that hold and run nothing give their domains back; forgotten gangs are
        collected."""
        now = self.clock()
        changed = self.book.expire(now)
        pods = self.pods
        crowded, expired = pods.expire(now)
        for forgotten, why in ((crowded, f"more than {pods.max_unshown} pods or "
                                          f"{pods.max_unshown_bytes >> 20} MiB known only from filter"),
                               (expired, f"not within {pods.ttl:g}s of its last filter call")):
            for pod in forgotten:
                gang = self.state.slot_gang(pod.key)  # its slot's gang: the pod may name another now
                if gang is not None:
                    changed |= self.book.member_deleted(gang, pod.key, verdicts.member_unshown(pod.key, gang, why))
                    self.state.drop_slot(pod.key)  # still held if that gang is not planned
            if forgotten:
                self.ports.observer.pods_forgotten(len(forgotten))
        changed |= self.book.end_claims(now, lambda gang: bool(pods.bound_pods(gang)))
        if changed:
            self.changed()
        self.book.collect(now, pods.has_pending)
        return now

    def request(self, rec: GangRecord, pod: PodFacts) -> tuple[GangSpec, list[PodFacts], list[PodFacts]]:
        """The gang's request this round: (spec, its pending members, its running members and
        those that ran and Succeeded: a lead that finished counts as done, not as missing)."""
        members = [p for p in self.pods.pending_of(rec.key) if p.uid not in rec.bound_uids]
        if not any(p.key == pod.key for p in members):
            members.append(pod)
        members.sort(key=lambda p: p.key)
        running = self.pods.bound_pods(rec.key) + self.pods.done_pods(rec.key)
        gangs = self.settings.gangs
        spec = gangspec.build(rec.key, members, gangspec.group_of(self.groups, pod), gangs.default_timeout_seconds,
                              running=running, max_timeout=gangs.max_timeout_seconds,
                              max_preferred_wait=gangs.max_preferred_wait_seconds)
        return spec, members, running

    def unsettled(self, spec: GangSpec, now: float) -> str | None:
        """Why a gang of undeclared size is not planned yet (``core.gangs.settle``), or None."""
        return settle.unsettled(spec, self.arrivals.last(spec.key), now, self.settings.gangs.settle_seconds)

    def _publish(self, rec: GangRecord, previous: Phase | None, event: Event | None) -> None:
        if self.watchers:
            change = GangChange.of(rec, previous, event)
            for sink in list(self.watchers):
                sink(change)


def per_pod(call: Callable[[Sequence[tuple[PodRef, T]]], Sequence[Exception | None]],
            items: Sequence[tuple[PodRef, T]]) -> dict[str, Exception | None]:
    """A port's per-pod answers (Bindings, marks) by pod key: None or the error. A port that
    raised instead of answering per pod gave every pod its error."""
    try:
        answers = list(call(items))
    except Exception as exc:
        answers = [exc] * len(items)
    return {pod.key: answer for (pod, _), answer in zip(items, answers)}
