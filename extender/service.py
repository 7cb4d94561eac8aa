"""The live extender: orchestration over the core, with no transport and no decisions of its own.

Its one job is the part that cannot be pure: one lock around the core's state, the cache sink,
the verbs, and the subscriptions of WatchGangs; bind calls held until their gang's permit
decision, the Binding fan-out and its compensation are in ``gate.py`` under the same lock.
What to do is decided in ``core`` (``book`` for gangs, ``single`` for lone pods,
``preemption`` and ``eviction`` for victims); read-only answers are in ``whatif``; a gang's
preemption (evictions, waiting for the victims) is orchestrated in ``preempting.py``.

Facts arrive translated (``core.model``): the adapters call the cache-sink methods from the
watch threads and the verbs from the HTTP and gRPC servers.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Callable, Sequence

from extender.core import gangspec, ledger, settle, verdicts
from extender.core.book import GangBook, GangRecord
from extender.core.devices import ClaimFacts, ClaimTemplateFacts, DeviceClassFacts, DraFacts, SliceFacts
from extender.core.errors import NotReady, Settling
from extender.core.ledger import Changes, DeviceLedger
from extender.core.lifecycle import HOLDING, Event, Phase
from extender.core.model import GangRef, GangSpec, GroupFacts, NodeFacts, PodFacts
from extender.core.planner import home_domains
from extender.core.pods import PodIndex
from extender.core.ports import Binder, LabelScheme, NullObserver, Observer
from extender.core.preemption import vet_victims
from extender.core.single import best_fit_scores, filter_single, filter_unreadable, planned_scores
from extender.core.state import ClusterState
from extender.core.verdicts import FilterVerdict
from extender.core.recovery import Rounds
from extender.gate import PermitGate
from extender.preempting import Preempter
from extender.recovering import Recoverer
from extender.settings import Settings
from extender.whatif import GangAnswer, Live, debug_gangs, explain, plan_gangs

KINDS = ("nodes", "pods", "podgroups")
"""What the watch cache lists before railyard plans a gang, unless told otherwise (``kinds``):
nodes, pods, and each kind of group object (opaque names; ``GroupFacts.kind``), and the DRA
kinds (``DRA_KINDS``) where the watch cache lists them."""
DRA_KINDS = {"deviceclasses": DeviceClassFacts, "resourceslices": SliceFacts, "resourceclaims": ClaimFacts,
             "resourceclaimtemplates": ClaimTemplateFacts}


class _DeviceSink:
    """The DRA half of the cache sink, and the sizing of pods by their claims (``core.ledger``);
    a part of ``TopologyExtender``, apart only to keep each class readable."""

    _cond: threading.Condition
    devices: DeviceLedger
    pods: PodIndex
    state: ClusterState
    binder: Binder
    kinds: tuple[str, ...]
    _synced: frozenset[str]

    def ready(self) -> bool:
        # No lock: /readyz answers while a long call (a relist, a large PlanGang) holds it.
        return set(self.kinds) <= self._synced

    def _put_node(self, node: NodeFacts) -> None:
        raise NotImplementedError

    def dra_upserted(self, facts: DraFacts) -> None:
        with self._cond:
            self._dra_changed(self.devices.upserted(facts))
            # A gang released at bind leaves no claim allocated to a member that was not bound
            # (kube-scheduler's Unreserve keeps it, pinning the next attempt: docs/dra.md).
            leftover = self.devices.leftover(facts.key, lambda p: self.pods.seen_pod(p) is not None) \
                if isinstance(facts, ClaimFacts) else None
            if leftover is not None:
                namespace, name = leftover.key.split("/", 1)
                self.binder.deallocate_claim(namespace, name, leftover.uid, leftover.resource_version)

    def dra_deleted(self, facts: DraFacts) -> None:
        with self._cond:
            self._dra_changed(self.devices.deleted(facts))

    def _dra_changed(self, changes: Changes) -> None:
        for node in ledger.dra_changed(self.devices, self.pods, self.state, changes):
            self._put_node(node)

    def _sized(self, pod: PodFacts, filtering: bool = False) -> PodFacts:
        """The pod with the GPUs of its claims; one railyard cannot size is left to
        kube-scheduler (a pod of no gang and no GPUs to railyard), with the reason in an Event."""
        if not pod.claims:
            return pod
        with self._cond:
            if filtering and pod.gang.named and not self.ready():
                raise NotReady(verdicts.still_listing(sorted(set(self.kinds) - self._synced), pod.gang.key))
            sized, problem = self.devices.size(pod)
        if not problem:
            return sized
        if filtering:
            self.binder.event(pod, "GPUsNotSized", verdicts.not_sized(problem))
        return replace(pod, gang=GangRef(pod.key, False), gpus=0)


class TopologyExtender(_DeviceSink):
    """filter / prioritize / bind / preempt over the core, fed by the watch cache.

    Thread-safe: one lock guards the core; bind calls wait on its condition, and the Bindings
    themselves are created outside it.
    """

    def __init__(self, settings: Settings, binder: Binder, scheme: LabelScheme, observer: Observer | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 kinds: Sequence[str] = KINDS):
        self.settings = settings
        self.kinds = tuple(kinds)
        self.binder = binder
        self.scheme = scheme
        self.observer: Observer = observer or NullObserver()
        self.clock = clock
        self.sleep = sleep
        fixed = scheme.explicit(settings.placement.levels) if settings.placement.levels else None
        self._fixed_levels = fixed.levels if fixed else None
        self.state = ClusterState(self._fixed_levels or ())
        self.book = GangBook(self.state, self.observer, on_step=self._publish,
                             starvation_seconds=settings.gangs.starvation_seconds)
        self.pods = PodIndex()
        self.groups: dict[tuple[str, str], GroupFacts] = {}
        """By ``GroupFacts.id``: a pod reads the group its own convention names."""
        self.arrivals = settle.Arrivals()
        self.devices = DeviceLedger(settings.placement.gpu_resource, settings.dra.device_classes,
                                    settings.dra.rail_attribute, settings.topology_attributes())
        self._cond = threading.Condition(threading.RLock())
        self.rounds = Rounds()
        self.gate = PermitGate(self._cond, self.book, self.pods, binder, self.observer, settings.gangs,
                               self._tick, clock, sleep, self._tell)
        self.recoverer = Recoverer(self._cond, self.state, self.book, self.rounds, self.pods, binder,
                                   self.observer, settings.gangs, clock, self._tell)
        self.preempter = Preempter(self._cond, self.state, self.book, self.pods, binder, settings, clock,
                                   self._spec, lambda spec, now: settle.unsettled(
                                       spec, self.arrivals.last(spec.key), now, settings.gangs.settle_seconds))
        self._schemes: frozenset[str] = frozenset()
        self._levels_stale = False
        self._synced: frozenset[str] = frozenset()
        """Replaced, never changed: ``ready`` reads it without the lock."""
        self._watchers: list[Callable[[dict], None]] = []

    # -- cache sink (watch threads) ------------------------------------------------------------

    def node_upserted(self, node: NodeFacts) -> None:
        with self._cond:
            self._put_node(self.devices.node_seen(node))

    def _put_node(self, node: NodeFacts) -> None:
        with self._cond:
            if self._fixed_levels is None and not self.scheme.schemes_of(node) <= self._schemes:
                self._levels_stale = True
            old = self.state.node(node.name)
            self.state.upsert_node(node)
            if old is not None and (old.unschedulable, old.ready, old.taints) != (node.unschedulable, node.ready,
                                                                                   node.taints):
                if self.book.node_changed(node):  # a planned node no longer takes its members
                    self._tell()
                    self._cond.notify_all()

    def node_deleted(self, name: str) -> None:
        with self._cond:
            self.devices.node_gone(name)
            self.state.delete_node(name)
            if self.book.node_deleted(name):
                self._tell()
                self._cond.notify_all()

    def pod_upserted(self, pod: PodFacts) -> None:
        with self._cond:
            ledger.pod_changed(self.devices, self.pods, self.state, pod)
            self.rounds.changed(pod, self.clock())
            self.arrivals.noted(pod, self.pods, self.clock())

    def pod_deleted(self, pod: PodFacts) -> None:
        with self._cond:
            ledger.pod_deleted(self.devices, self.pods, self.state, pod)
            self.rounds.gone(pod)
            self.preempter.gone(pod.uid or pod.key)
            self.arrivals.noted(pod, self.pods, self.clock())
            if pod.gang.named and self.book.member_deleted(pod.gang.key, pod.key):
                self._tell()
                self._cond.notify_all()

    def group_upserted(self, group: GroupFacts) -> None:
        with self._cond:
            self.groups[group.id] = group

    def group_deleted(self, group: GroupFacts) -> None:
        with self._cond:
            self.groups.pop(group.id, None)

    def relisted(self, kind: str, objects: Sequence[NodeFacts | PodFacts | GroupFacts | DraFacts]) -> None:
        with self._cond:
            if kind == "nodes":
                self.state.set_nodes(self.devices.nodes_relisted(o for o in objects if isinstance(o, NodeFacts)))
                self._redetect(force=True)
            elif kind == "pods":
                pods = [p for p in objects if isinstance(p, PodFacts)]
                ledger.pods_relisted(self.devices, self.pods, self.state, pods)
                self.rounds.clear()
                for pod in pods:
                    self.rounds.changed(pod, self.clock())
                self.state.drop_bound_slots_except({p.key for p in pods})
                self.preempter.relisted({p.uid or p.key for p in pods})
                self.arrivals.prune(self.pods.has_pending)
            elif kind in DRA_KINDS:
                self._dra_changed(self.devices.relisted(DRA_KINDS[kind], objects))
            else:  # one kind of group object
                self.groups = {i: g for i, g in self.groups.items() if i[0] != kind}
                self.groups.update((g.id, g) for g in objects if isinstance(g, GroupFacts))
            self._synced |= {kind}

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
        pod = self._sized(pod, filtering=True)
        if pod.problems and (pod.gpus == 0 or not pod.gang.named):
            # Unreadable values (GPUs "abc" or "500m" are not 0 GPUs): nowhere, with the reason.
            # A GPU member's problems are its gang's reason, below.
            return filter_unreadable(pod.key, pod.problems, node_names)
        if pod.gpus == 0:
            with self._cond:  # without managedResources (DRA claims) every pod comes: bind must know it
                self.pods.filtered(pod, self._tick())
            return FilterVerdict(tuple(node_names))
        self.recoverer.run()
        with self._cond:
            now = self._tick()
            if self._levels_stale:
                self._redetect()
            if pod.gang.named and not self.ready():
                # Serving starts before the lists finish (a restart, kill -9 included): a plan
                # made on nodes without their pods would promise GPUs that are in use.
                raise NotReady(verdicts.still_listing(sorted(set(self.kinds) - self._synced), pod.gang.key))
            self.pods.filtered(pod, now)
            self.arrivals.noted(pod, self.pods, now)
            if not pod.gang.named:
                return filter_single(self.state.view(), pod.gpus, node_names)
            rec = self.book.record(pod.gang.key, now)
            round_ = rec.round
            self.book.prepare(rec, pod.key)
            waiting = self.preempter.hold(rec, pod, node_names)
            if waiting is not None:
                return waiting
            for _ in range(2):  # a plan whose node the scheduler refuses is made again at once
                if rec.phase == Phase.PENDING:
                    self._reserve(rec, pod, node_names, now)
                before = rec.round
                verdict = self.book.steer(rec, pod, node_names)
                if rec.round == before:
                    break
            if rec.phase not in HOLDING and not self.pods.unshown_pod(pod.key):
                # Events only about pods the watch shows: a pod that exists nowhere else (a
                # client naming pods at will) costs the API server nothing.
                self.binder.event(pod, "GangUnschedulable", rec.reason)
            self._tell()
            if rec.round != round_:
                self._cond.notify_all()
            return verdict

    def _spec(self, rec: GangRecord, pod: PodFacts) -> tuple[GangSpec, list[PodFacts], list[PodFacts]]:
        """The gang's request this round: (spec, its pending members, its running members)."""
        members = [p for p in self.pods.pending_of(rec.key) if p.uid not in rec.bound_uids]
        if not any(p.key == pod.key for p in members):
            members.append(pod)
        members.sort(key=lambda p: p.key)
        running = self.pods.bound_pods(rec.key)
        spec = gangspec.build(rec.key, members, self.groups.get(pod.gang.group_id),
                              self.settings.gangs.default_timeout_seconds, running=len(running),
                              max_timeout=self.settings.gangs.max_timeout_seconds)
        return spec, members, running

    def _reserve(self, rec: GangRecord, pod: PodFacts, node_names: list[str], now: float) -> None:
        spec, _, running = self._spec(rec, pod)
        wait = settle.unsettled(spec, self.arrivals.last(rec.key), now, self.settings.gangs.settle_seconds)
        if wait is not None:
            self.book.unsettled(rec, wait)
            raise Settling(wait)
        started = time.perf_counter()
        topo = self.state.topology
        # kube-scheduler's verdict as evidence: the names it sends passed its own filters for
        # this pod (all feasible nodes with percentageOfNodesToScore: 100), so a node it left out
        # fails something railyard does not model (host ports, volumes, pod affinity...).
        sent = set(node_names)
        refused = [n for n in topo.names if n not in sent] if len(sent) < len(topo.names) else []
        homes = home_domains(topo, spec, [p.node for p in running])
        self.book.reserve(rec, spec, now, refused, homes)
        self.observer.plan_seconds(time.perf_counter() - started)

    def prioritize(self, pod: PodFacts, node_names: list[str]) -> list[tuple[str, int]]:
        pod = self._sized(pod)
        with self._cond:
            slot = self.state.slot_of(pod.key)
            if slot is not None:
                return planned_scores(slot.node, node_names)
            if pod.gpus == 0:
                return []  # every host 0: unlisted hosts score 0
            return best_fit_scores(self.state.view(), pod.gpus, node_names)

    # -- bind: the gang's permit gate (gate.py) ------------------------------------------------

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.recoverer.run()
        self.gate.bind(namespace, name, uid, node)

    def _tick(self) -> float:
        """Apply time: expired deadlines end their rounds; pods only filter has seen, past their
        time or the bounds, are forgotten as if deleted; forgotten gangs are collected."""
        now = self.clock()
        changed = self.book.expire(now)
        crowded, expired = self.pods.expire(now)
        for pods, why in ((crowded, f"more than {self.pods.max_unshown} pods or "
                                    f"{self.pods.max_unshown_bytes >> 20} MiB known only from filter"),
                          (expired, f"not within {self.pods.ttl:g}s of its last filter call")):
            for pod in pods:
                gang = self.state.slot_gang(pod.key)  # its slot's gang: the pod may name another now
                if gang is not None:
                    changed |= self.book.member_deleted(gang, pod.key, verdicts.member_unshown(pod.key, gang, why))
                    self.state.drop_slot(pod.key)  # still held if that gang is not planned
            if pods:
                self.observer.pods_forgotten(len(pods))
        if changed:
            self._tell()
            self._cond.notify_all()
        self.book.collect(now, self.pods.has_pending)
        return now

    def _tell(self) -> None:
        tell(self.book, self.pods, self.binder)

    # -- preempt -------------------------------------------------------------------------------

    def preempt(self, pod: PodFacts, victims: dict[str, list[str]]) -> dict[str, list[str]]:
        """A pod of no gang: kube-scheduler's victims, vetoed where they would break a running
        gang. A gang member: railyard chooses and evicts (``preempting``); the scheduler is told
        to evict nothing (an empty reply), so its per-pod choices never scatter evictions."""
        pod = self._sized(pod)
        with self._cond:
            if not pod.gang.named:
                return vet_victims(self.state, pod.gpus, self.state.slot_of(pod.key), victims,
                                   self.pods.bound_gang_of, self.pods.bound_uids)
            now = self._tick()
            jobs = self.preempter.member(self.book.record(pod.gang.key, now), pod, now) if self.ready() else []
        self.preempter.start(jobs)
        return {}

    # -- read-only answers and subscriptions (the gRPC API, /debug/gangs) ----------------------

    def _live(self) -> Live:
        g = self.settings.gangs
        return Live(self.state, self.book, self.pods, self.groups, g.default_timeout_seconds,
                    self.arrivals, g.settle_seconds, g.max_timeout_seconds)

    def debug_gangs(self) -> list[dict]:
        with self._cond:  # time applied first: no deadline shown passed, no forgotten pod shown
            return debug_gangs(self._live(), self._tick())

    def explain(self, pod_key: str) -> dict | None:
        with self._cond:
            return explain(self._live(), pod_key, self._tick())

    def plan_gang(self, pods: Sequence[PodFacts]) -> list[GangAnswer]:
        with self._cond:
            return plan_gangs(self._live(), [self.devices.size(p)[0] for p in pods])

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


def expire(service: TopologyExtender) -> None:
    """Apply time with no call to carry it (``App.ticker``, every few seconds): on a quiet
    cluster what a burst of calls left (pods only filter saw, their gangs) still expires."""
    with service._cond:
        service._tick()


def held(service: TopologyExtender) -> dict[str, int]:
    """What the service holds, by kind (/metrics). Lengths read without the lock: a scrape
    never waits behind a verb, and a count a moment old is good enough."""
    return {"gangs": len(service.book), "reservations": len(service.state.reservations()), **service.pods.sizes()}


def _gang_event(rec: GangRecord, previous: Phase | None, event: Event | None) -> dict:
    return {"gang": rec.key, "phase": rec.phase.value, "previous": previous.value if previous else "",
            "event": event.value if event else "", "reason": rec.reason}


def tell(book: GangBook, pods: PodIndex, binder: Binder) -> None:
    """The book's notices as Events on the pods they concern (never blocks; rate-limited)."""
    for notice in book.take_notices():
        for key in notice.members:
            pod = pods.pending_pod(key) or pods.seen_pod(key) or pods.bound_named(key)
            if pod is not None and not pods.unshown_pod(key):  # only pods the watch shows
                binder.event(pod, notice.reason, notice.message, "Warning" if notice.warning else "Normal")
