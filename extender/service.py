"""The live extender: orchestration over the core, with no transport and no decisions of its own.

Its one job is the part that cannot be pure: one lock around the core's state, bind calls held
until their gang's permit decision, the Binding fan-out and its compensation, and the
subscriptions of WatchGangs. What to do is decided in ``core`` (``book`` for gangs, ``single``
for lone pods, ``preemption`` for victims); read-only answers are in ``whatif``.

Facts arrive translated (``core.model``): the adapters call the cache-sink methods from the
watch threads and the verbs from the HTTP and gRPC servers.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

from extender.core import gangspec, verdicts
from extender.core.book import BOUND, FAILED, TIMED_OUT, Allow, GangBook, GangRecord, Outcome, Reject, Wait
from extender.core.errors import BindingFailed, GangTimedOut, GangUnreserved, NotReady, PermitRejected
from extender.core.lifecycle import HOLDING, Event, Phase
from extender.core.model import GroupFacts, NodeFacts, PodFacts
from extender.core.pods import PodIndex
from extender.core.ports import Binder, LabelScheme, NullObserver, Observer
from extender.core.preemption import vet_victims
from extender.core.single import best_fit_scores, filter_single, planned_scores
from extender.core.state import ClusterState
from extender.core.verdicts import FilterVerdict
from extender.settings import Settings
from extender.whatif import GangAnswer, Live, debug_gangs, explain, plan_gangs

KINDS = ("nodes", "pods", "podgroups")
"""What the watch cache lists before railyard plans a gang."""


class TopologyExtender:
    """filter / prioritize / bind / preempt over the core, fed by the watch cache.

    Thread-safe: one lock guards the core; bind calls wait on its condition, and the Bindings
    themselves are created outside it.
    """

    def __init__(self, settings: Settings, binder: Binder, scheme: LabelScheme, observer: Observer | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.settings = settings
        self.binder = binder
        self.scheme = scheme
        self.observer: Observer = observer or NullObserver()
        self.clock = clock
        self.sleep = sleep
        fixed = scheme.explicit(settings.placement.levels) if settings.placement.levels else None
        self._fixed_levels = fixed.levels if fixed else None
        self.state = ClusterState(self._fixed_levels or ())
        self.book = GangBook(self.state, self.observer, on_step=self._publish)
        self.pods = PodIndex()
        self.groups: dict[str, GroupFacts] = {}
        self._cond = threading.Condition(threading.RLock())
        self._schemes: frozenset[str] = frozenset()
        self._levels_stale = False
        self._synced: set[str] = set()
        self._watchers: list[Callable[[dict], None]] = []

    # -- cache sink (watch threads) ------------------------------------------------------------

    def node_upserted(self, node: NodeFacts) -> None:
        with self._cond:
            if self._fixed_levels is None and not self.scheme.schemes_of(node) <= self._schemes:
                self._levels_stale = True
            self.state.upsert_node(node)

    def node_deleted(self, name: str) -> None:
        with self._cond:
            self.state.delete_node(name)
            if self.book.node_deleted(name):
                self._cond.notify_all()

    def pod_upserted(self, pod: PodFacts) -> None:
        with self._cond:
            self.pods.changed(pod, self.state)

    def pod_deleted(self, pod: PodFacts) -> None:
        with self._cond:
            self.pods.deleted(pod, self.state)
            if pod.gang.named and self.book.member_deleted(pod.gang.key, pod.key):
                self._cond.notify_all()

    def group_upserted(self, group: GroupFacts) -> None:
        with self._cond:
            self.groups[group.key] = group

    def group_deleted(self, key: str) -> None:
        with self._cond:
            self.groups.pop(key, None)

    def relisted(self, kind: str, objects: Sequence[NodeFacts | PodFacts | GroupFacts]) -> None:
        with self._cond:
            if kind == "nodes":
                self.state.set_nodes(o for o in objects if isinstance(o, NodeFacts))
                self._redetect(force=True)
            elif kind == "pods":
                self.pods.clear(self.state)
                pods = [p for p in objects if isinstance(p, PodFacts)]
                for pod in pods:
                    self.pods.changed(pod, self.state)
                self.state.drop_bound_slots_except({p.key for p in pods})
            elif kind == "podgroups":
                self.groups = {g.key: g for g in objects if isinstance(g, GroupFacts)}
            self._synced.add(kind)

    def ready(self) -> bool:
        with self._cond:
            return set(KINDS) <= self._synced

    def _redetect(self, force: bool = False) -> None:
        if self._fixed_levels is not None:
            levels = self._fixed_levels
        elif force or self._levels_stale:
            nodes = self.state.nodes()
            choice = self.scheme.detect(nodes)
            levels = choice.levels
            self._schemes = frozenset(s for n in nodes for s in self.scheme.schemes_of(n))
            self._levels_stale = False
        else:
            return
        self.state.set_levels(levels)

    # -- filter / prioritize -----------------------------------------------------------------

    def filter(self, pod: PodFacts, node_names: list[str]) -> FilterVerdict:
        if pod.gpus == 0:
            return FilterVerdict(tuple(node_names))
        with self._cond:
            now = self._tick()
            if self._levels_stale:
                self._redetect()
            if pod.gang.named and not self.ready():
                # Serving starts before the lists finish (a restart, kill -9 included): a plan
                # made on nodes without their pods would promise GPUs that are in use.
                raise NotReady(verdicts.still_listing(sorted(set(KINDS) - self._synced), pod.gang.key))
            self.pods.filtered(pod)
            if not pod.gang.named:
                return filter_single(self.state.view(), pod.gpus, node_names)
            rec = self.book.record(pod.gang.key, now)
            round_ = rec.round
            self.book.prepare(rec, pod.key)
            if rec.phase == Phase.PENDING:
                self._reserve(rec, pod, now)
            verdict = self.book.steer(rec, pod, node_names, self.settings.gangs.filter_failures_before_replan)
            if rec.phase not in HOLDING:
                self.binder.event(pod, "GangUnschedulable", rec.reason)
            if rec.round != round_:
                self._cond.notify_all()
            return verdict

    def _reserve(self, rec: GangRecord, pod: PodFacts, now: float) -> None:
        members = [p for p in self.pods.pending_of(rec.key) if p.uid not in rec.bound_uids]
        if not any(p.key == pod.key for p in members):
            members.append(pod)
        members.sort(key=lambda p: p.key)
        spec = gangspec.build(rec.key, members, self.groups.get(rec.key),
                              self.settings.gangs.default_timeout_seconds, running=len(self.pods.bound_uids(rec.key)))
        started = time.perf_counter()
        self.book.reserve(rec, spec, now)
        self.observer.plan_seconds(time.perf_counter() - started)

    def prioritize(self, pod: PodFacts, node_names: list[str]) -> list[tuple[str, int]]:
        with self._cond:
            slot = self.state.slot_of(pod.key)
            if slot is not None:
                return planned_scores(slot.node, node_names)
            if pod.gpus == 0:
                return []  # every host 0: unlisted hosts score 0
            return best_fit_scores(self.state.view(), pod.gpus, node_names)

    # -- bind: the gang's permit gate ----------------------------------------------------------

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        key = f"{namespace}/{name}"
        with self._cond:
            self._tick()
            pod = self.pods.seen_pod(key) or self.pods.pending_pod(key)
            if pod is None:
                raise PermitRejected(verdicts.unknown_pod(key))
            gang = pod.gang.key
            decision = self.book.permit(gang, key, uid, node) if pod.gang.named and self.book.get(gang) else None
        match decision:
            case None:
                error = self._bind_all({key: (uid, node)})[key]
                if error:
                    raise BindingFailed(error)
                return
            case Reject(reason=reason, unreserved=unreserved):
                raise GangUnreserved(reason) if unreserved else PermitRejected(reason)
            case Wait(round=round_):
                with self._cond:
                    outcome = self._wait(gang, key, round_)
            case Allow(round=round_, members=members):
                self._bind_gang(gang, members)
                with self._cond:
                    outcome = self.book.outcome(gang, key, round_)
        _answer(outcome)

    def _wait(self, gang: str, key: str, round_: int) -> Outcome:
        """Hold this bind call until the gang's Bindings are done or its round ends."""
        while (outcome := self.book.outcome(gang, key, round_)) is None:
            now = self.clock()
            if self.book.expire(now):
                self._cond.notify_all()
                continue
            self._cond.wait(timeout=max(min(self.book.deadline(gang) - now, 1.0), 0.01))
        return outcome

    def _bind_gang(self, gang: str, members: dict[str, tuple[str, str]]) -> None:
        """Create every member's Binding at once; if some fail after retries, evict the rest."""
        results = self._bind_all(members)
        with self._cond:
            compensate = self.book.bindings_done(gang, results, members, self.clock())
            if compensate is None:
                for key in members:
                    self.pods.took_bound(key)
                self._cond.notify_all()
                return
        # Compensate: never leave part of a gang bound. Evict the members bound so the gang
        # restarts whole; their controllers create new pods, which are planned again.
        eviction_errors = {}
        for key, uid in compensate.evict:
            namespace, name = key.split("/", 1)
            try:
                self.binder.delete_pod(namespace, name, uid)
            except Exception as exc:  # the binder's errors carry the API server's words
                eviction_errors[key] = verdicts.eviction_failed(key, str(exc))
        with self._cond:
            self.book.compensated(gang, results, eviction_errors)
            self._cond.notify_all()

    def _bind_all(self, members: dict[str, tuple[str, str]]) -> dict[str, str]:
        """Create the Bindings of ``members`` (key -> (uid, node)) in one burst, then retry the
        failed ones together with backoff; per member "" or its last error."""
        errors: dict[str, str] = {}
        pending = dict(members)
        attempts = self.settings.gangs.bind_attempts
        for i in range(attempts):
            bindings = [(*key.split("/", 1), uid, node) for key, (uid, node) in pending.items()]
            try:
                outcomes = list(self.binder.bind_all(bindings))
            except Exception as exc:  # a binder that raised instead of answering per Binding
                outcomes = [exc] * len(bindings)
            failed = {}
            for (key, (uid, node)), exc in zip(pending.items(), outcomes):
                if exc is None:
                    errors.pop(key, None)
                    continue
                errors[key] = verdicts.binding_failed(key, node, str(exc))
                self.observer.binding_failed()
                failed[key] = (uid, node)
            pending = failed
            if not pending:
                break
            if i + 1 < attempts:
                self.sleep(0.05 * 2 ** i)
        return {key: errors.get(key, "") for key in members}

    def _tick(self) -> float:
        """Apply time: expired deadlines end their rounds; forgotten gangs are collected."""
        now = self.clock()
        if self.book.expire(now):
            self._cond.notify_all()
        self.book.collect(now, self.pods.has_pending)
        return now

    # -- preempt -------------------------------------------------------------------------------

    def preempt(self, pod: PodFacts, victims: dict[str, list[str]]) -> dict[str, list[str]]:
        with self._cond:
            return vet_victims(self.state, pod.gpus, self.state.slot_of(pod.key), victims,
                               self.pods.bound_gang_of, self.pods.bound_uids)

    # -- read-only answers and subscriptions (the gRPC API, /debug/gangs) ----------------------

    def _live(self) -> Live:
        return Live(self.state, self.book, self.pods, self.groups, self.settings.gangs.default_timeout_seconds)

    def debug_gangs(self) -> list[dict]:
        with self._cond:
            return debug_gangs(self._live(), self.clock())

    def explain(self, pod_key: str) -> dict | None:
        with self._cond:
            return explain(self._live(), pod_key, self._tick())

    def plan_gang(self, pods: Sequence[PodFacts]) -> list[GangAnswer]:
        with self._cond:
            return plan_gangs(self._live(), pods)

    def watch_gangs(self, sink: Callable[[dict], None]) -> tuple[list[dict], Callable[[], None]]:
        """Subscribe ``sink`` to gang phase changes. Returns every gang as it is now (so nothing
        falls between the listing and the first change) and a function that unsubscribes.
        ``sink`` is called under the service lock: it must only enqueue.
        """
        with self._cond:
            self._watchers.append(sink)
            listing = [_gang_event(rec, None, None) for rec in self.book.records()]

        def unsubscribe() -> None:
            with self._cond:
                if sink in self._watchers:
                    self._watchers.remove(sink)
        return listing, unsubscribe

    def _publish(self, rec: GangRecord, previous: Phase | None, event: Event | None) -> None:
        if self._watchers:
            change = _gang_event(rec, previous, event)
            for sink in list(self._watchers):
                sink(change)


def _answer(outcome: Outcome) -> None:
    """A held bind call's reply: return (bound) or the error the scheduler sees."""
    if outcome.kind == BOUND:
        return
    if outcome.kind == FAILED:
        raise BindingFailed(outcome.reason)
    if outcome.kind == TIMED_OUT:
        raise GangTimedOut(outcome.reason)
    raise GangUnreserved(outcome.reason)


def _gang_event(rec: GangRecord, previous: Phase | None, event: Event | None) -> dict:
    return {"gang": rec.key, "phase": rec.phase.value, "previous": previous.value if previous else "",
            "event": event.value if event else "", "reason": rec.reason}
