"""railyard's use cases over the core, with no transport: what-if planning here; the live
extender's verbs (filter, prioritize, bind, preempt) build on the same pieces.

Takes raw Kubernetes objects (dicts), translates them once with ``adapters.kubeobjects``
and hands facts to the core.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

from extender.adapters import kubeobjects as ko
from extender.core.errors import BindingFailed, BindRefused, GangReleased, GangTimedOut, NotReady
from extender.core.gang import HOLDING, Event, Phase, next_phase
from extender.core.planner import NoPlacement, Placement, domain_fits, plan
from extender.core.state import ClusterState, Reservation, claim_slot
from extender.core.topology import format_path
from extender.core.verdicts import FilterVerdict, explain_no_placement, explain_placement
from extender.settings import Settings


@dataclass(frozen=True)
class GangAnswer:
    """One gang's what-if answer, as ``railyard plan`` prints it."""

    gang: str
    feasible: bool
    level: str | None
    domain: list[str | None] | None
    placement: dict[str, str]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "gang": self.gang,
            "feasible": self.feasible,
            "level": self.level,
            "domain": self.domain,
            "placement": self.placement,
            "reason": self.reason,
        }


@dataclass
class WhatIf:
    """A cluster loaded from objects, ready to plan pending gangs in order."""

    state: ClusterState
    gpu_resource: str = ko.GPU_RESOURCE
    podgroups: dict[str, ko.PodGroupFacts] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, nodes: Sequence[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]] = (),
             podgroups: Iterable[Mapping[str, Any]] = (), levels: Sequence[str] | None = None,
             gpu_resource: str = ko.GPU_RESOURCE) -> "WhatIf":
        choice = ko.explicit_levels(levels) if levels else ko.detect_levels(nodes)
        state = ClusterState(choice.levels)
        problems = list(choice.problems)
        for node in nodes:
            facts = ko.node_facts(node, choice.levels, gpu_resource)
            if not facts.name:
                problems.append("a node without metadata.name was skipped")
                continue
            state.upsert_node(facts)
        unknown_nodes = 0
        for pod in pods:
            usage = ko.pod_usage(pod, gpu_resource)
            if usage is None:
                continue
            if state.node(usage.node) is None:
                unknown_nodes += 1
            state.upsert_pod(usage)
        if unknown_nodes:
            problems.append(f"{unknown_nodes} pod(s) on nodes that are not in the node list were ignored")
        problems.extend(state.topology.problems)
        groups = {f.key: f for f in map(ko.podgroup_facts, podgroups)}
        return cls(state, gpu_resource, groups, problems)

    def plan_pending(self, pending: Iterable[Mapping[str, Any]]) -> list[GangAnswer]:
        """Plan each gang in order of first appearance; each sees the ones before it reserved."""
        answers = []
        for key, members in ko.group_pods(pending).items():
            gang = ko.gang_spec(key, members, self.podgroups, self.gpu_resource)
            result = plan(gang, self.state.snapshot())
            answers.append(self._answer(result, {ko.pod_key(p) for p in members}))
            if isinstance(result, Placement):
                self.state.reserve(Reservation(key, result.slots, math.inf))
        return answers

    def _answer(self, result: Placement | NoPlacement, members: set[str]) -> GangAnswer:
        return _answer(self.state, result, members)


def _answer(state: ClusterState, result: Placement | NoPlacement, members: set[str]) -> GangAnswer:
    topo = state.topology
    if isinstance(result, NoPlacement):
        return GangAnswer(result.gang, False, None, None, {}, explain_no_placement(topo, result))
    return GangAnswer(
        gang=result.gang,
        feasible=True,
        level=topo.level_key(result.level),
        domain=list(result.domain.path),
        placement={s.member: s.node for s in result.slots if s.member in members},
        reason=explain_placement(topo, result),
    )


# -- the live extender ------------------------------------------------------------------------


class Binder(Protocol):
    """Writes to the API server (``adapters/k8s/binder.py``)."""

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...
    def delete_pod(self, namespace: str, name: str, uid: str) -> None: ...
    def event(self, pod: dict, reason: str, message: str, type_: str = "Warning") -> None: ...


class Observer(Protocol):
    """What the service reports (``adapters/metrics.Metrics`` implements it)."""

    def gang_finished(self, outcome: str) -> None: ...
    def gang_time_to_bind(self, seconds: float) -> None: ...
    def reservations(self, gangs: int, gpus: int) -> None: ...
    def plan_seconds(self, seconds: float) -> None: ...
    def cache_objects(self, kind: str, n: int) -> None: ...
    def watch_event(self) -> None: ...
    def binding_failed(self) -> None: ...


class NullObserver:
    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


@dataclass
class GangRecord:
    """A gang as the live extender tracks it (guarded by the service lock)."""

    key: str
    first_seen: float
    phase: Phase = Phase.PENDING
    reason: str = ""
    placement: Placement | None = None
    deadline: float | None = None
    quorum: int = 0
    """GPU members that must be held at bind before any is bound."""
    at_bind: dict[str, tuple[str, str]] = field(default_factory=dict)
    """member key -> (uid, node) of members held at bind."""
    results: dict[str, str] = field(default_factory=dict)
    """member key -> "" (bound) or the error, once the gang's Bindings were tried."""
    round: int = 0
    """Bumped whenever a reservation ends, so held binds of that round stop waiting."""
    steer_misses: int = 0
    members: tuple[str, ...] = ()
    sized: bool = True
    bound_at: float | None = None
    bound_uids: set[str] = field(default_factory=set)
    """UIDs railyard bound for this gang: never members of a later round, even while the
    watch still shows them unbound."""
    on_step: Callable[["GangRecord", Phase, Event], None] | None = field(default=None, repr=False, compare=False)
    """Called after every transition (WatchGangs); set ``reason`` before stepping."""

    def step(self, event: Event) -> None:
        previous = self.phase
        self.phase = next_phase(self.phase, event)
        if self.on_step is not None:
            self.on_step(self, previous, event)


class PendingPods:
    """Unbound, unfinished pods that ask for GPUs or name a gang, by ``ns/name`` and by gang,
    so that planning a gang never scans every pending pod of the cluster."""

    def __init__(self) -> None:
        self._pods: dict[str, dict] = {}
        self._gang_of: dict[str, str] = {}
        self._by_gang: dict[str, dict[str, dict]] = {}

    def __len__(self) -> int:
        return len(self._pods)

    def get(self, key: str) -> dict | None:
        return self._pods.get(key)

    def put(self, key: str, pod: dict) -> None:
        self.pop(key)
        gang = ko.group_key(pod)[0]
        self._pods[key] = pod
        self._gang_of[key] = gang
        self._by_gang.setdefault(gang, {})[key] = pod

    def setdefault(self, key: str, pod: dict) -> None:
        if key not in self._pods:
            self.put(key, pod)

    def pop(self, key: str) -> dict | None:
        pod = self._pods.pop(key, None)
        if pod is not None:
            gang = self._gang_of.pop(key)
            members = self._by_gang[gang]
            del members[key]
            if not members:
                del self._by_gang[gang]
        return pod

    def clear(self) -> None:
        self._pods.clear()
        self._gang_of.clear()
        self._by_gang.clear()

    def of_gang(self, gang: str) -> list[dict]:
        return list(self._by_gang.get(gang, {}).values())

    def has_gang(self, gang: str) -> bool:
        return gang in self._by_gang


class TopologyExtender:
    """filter / prioritize / bind / preempt over the core, fed by the watch cache.

    Thread-safe: one lock guards the state; bind calls wait on its condition, and the
    Bindings themselves are created outside it.
    """

    def __init__(self, settings: Settings, binder: Binder, observer: Observer | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.binder = binder
        self.observer = observer or NullObserver()
        self.clock = clock
        self.gpu = settings.placement.gpu_resource
        levels = ko.explicit_levels(settings.placement.levels) if settings.placement.levels else None
        self._fixed_levels = levels.levels if levels else None
        self.state = ClusterState(self._fixed_levels or ())
        self.level_problems: tuple[str, ...] = levels.problems if levels else ()
        self._cond = threading.Condition(threading.RLock())
        self._nodes: dict[str, dict] = {}
        self._presets: frozenset[str] = frozenset()
        self._levels_stale = False
        self._pending = PendingPods()
        self._next_gc = 0.0
        self._bound: dict[str, tuple[str, str]] = {}
        """uid -> (gang key, pod key) of bound pods of named gangs (for preempt)."""
        self._seen: dict[str, tuple[str, bool, int]] = {}
        """pod key -> (gang key, named, gpus) for pods filter saw: bind only carries names."""
        self._gangs: dict[str, GangRecord] = {}
        self._podgroups: dict[str, ko.PodGroupFacts] = {}
        self._synced: set[str] = set()
        self._watchers: list[Callable[[dict], None]] = []
        self._leftovers = itertools.count(1)

    # -- cache sink ---------------------------------------------------------------------------

    def node_upserted(self, node: dict) -> None:
        with self._cond:
            name = _name_of(node)
            if not name:
                return
            self._nodes[name] = node
            if self._fixed_levels is None and not ko.presets_of(node) <= self._presets:
                self._levels_stale = True
            self.state.upsert_node(ko.node_facts(node, self.state.levels, self.gpu))
            self.observer.watch_event()

    def node_deleted(self, name: str) -> None:
        with self._cond:
            self._nodes.pop(name, None)
            self.state.delete_node(name)
            for rec in list(self._gangs.values()):
                if rec.phase in HOLDING and rec.phase != Phase.BINDING and rec.placement and any(
                        s.node == name for s in rec.placement.slots):
                    self._release(rec, Event.NODE_LOST, f"node {name} was deleted while gang {rec.key} "
                                  f"waited; planning again")
            self.observer.watch_event()

    def pod_upserted(self, pod: dict) -> None:
        with self._cond:
            self._pod_changed(pod)
            self.observer.watch_event()

    def pod_deleted(self, pod: dict) -> None:
        with self._cond:
            key = ko.pod_key(pod)
            uid = _uid_of(pod) or key
            self.state.delete_pod(uid)
            self._bound.pop(uid, None)
            self._pending.pop(key)
            self._seen.pop(key, None)
            gang, named = ko.group_key(pod)
            rec = self._gangs.get(gang)
            if named and rec is not None and rec.phase in (Phase.PLANNED, Phase.WAITING) and key in rec.members:
                self._release(rec, Event.MEMBER_LOST, f"member {key} was deleted while gang {gang} "
                              f"waited; planning again")
            self.observer.watch_event()

    def podgroup_upserted(self, pg: dict) -> None:
        with self._cond:
            facts = ko.podgroup_facts(pg)
            self._podgroups[facts.key] = facts

    def podgroup_deleted(self, namespace: str, name: str) -> None:
        with self._cond:
            self._podgroups.pop(f"{namespace}/{name}", None)

    def relisted(self, kind: str, objects: list[dict]) -> None:
        with self._cond:
            if kind == "nodes":
                self._nodes = {n: o for o in objects if (n := _name_of(o))}
                self._redetect(force=True)
            elif kind == "pods":
                for uid in list(self.state._pods):  # a full replacement
                    self.state.delete_pod(uid)
                self._pending.clear()
                self._bound.clear()
                for pod in objects:
                    self._pod_changed(pod)
            elif kind == "podgroups":
                self._podgroups = {f.key: f for f in map(ko.podgroup_facts, objects)}
            self._synced.add(kind)
            self.observer.cache_objects(kind, len(objects))
            self.observer.watch_event()

    def mark_synced(self, kind: str) -> None:
        """A kind that does not exist in this cluster (the PodGroup CRD) counts as synced."""
        with self._cond:
            self._synced.add(kind)

    def ready(self) -> bool:
        with self._cond:
            return {"nodes", "pods", "podgroups"} <= self._synced

    def _pod_changed(self, pod: dict) -> None:
        key = ko.pod_key(pod)
        uid = _uid_of(pod) or key
        gang, named = ko.group_key(pod)
        phase = ko.pod_phase(pod)
        node = ko.pod_node(pod)
        if phase in ("Succeeded", "Failed"):
            self.state.delete_pod(uid)
            self._bound.pop(uid, None)
            self._pending.pop(key)
            return
        if node:
            self._pending.pop(key)
            self._seen.pop(key, None)  # bind has happened: only filter-to-bind needs it
            usage = ko.pod_usage(pod, self.gpu)
            if usage is not None:
                self.state.upsert_pod(usage, member_key=key)
            if named:
                self._bound[uid] = (gang, key)
            return
        if named or ko.pod_gpus(pod, self.gpu) > 0:
            self._pending.put(key, pod)

    def _redetect(self, force: bool = False) -> None:
        if self._fixed_levels is not None:
            levels = self._fixed_levels
        elif force or self._levels_stale:
            choice = ko.detect_levels(self._nodes.values())
            levels, self.level_problems = choice.levels, choice.problems
            self._presets = frozenset(p for n in self._nodes.values() for p in ko.presets_of(n))
            self._levels_stale = False
        else:
            return
        self.state.set_levels(levels, [ko.node_facts(n, levels, self.gpu) for n in self._nodes.values()])

    # -- filter / prioritize ------------------------------------------------------------------

    def filter(self, pod: dict, node_names: list[str]) -> FilterVerdict:
        gpus = ko.pod_gpus(pod, self.gpu)
        if gpus == 0:
            return FilterVerdict(tuple(node_names))
        with self._cond:
            now = self.clock()
            self._expire(now)
            self._collect(now)
            if self._levels_stale:
                self._redetect()
            key = ko.pod_key(pod)
            gang, named = ko.group_key(pod)
            if named and not self.ready():
                # Serving starts before the lists finish (a restart, kill -9 included): a plan
                # made on nodes without their pods would promise GPUs that are in use.
                missing = ", ".join(sorted({"nodes", "pods", "podgroups"} - self._synced))
                raise NotReady(f"railyard is still listing {missing} after a start; gang {gang} is "
                               f"planned once it has (the scheduler retries the pod)")
            self._seen[key] = (gang, named, gpus)
            if not ko.pod_node(pod):
                self._pending.setdefault(key, pod)
            if not named:
                return self._filter_single(gpus, node_names)
            rec = self._gang(gang, now)
            if rec.phase in (Phase.TIMED_OUT, Phase.REJECTED, Phase.BOUND):
                rec.step(Event.RETRY)
            if rec.phase in (Phase.PLANNED, Phase.WAITING) and not rec.sized and key not in rec.members:
                self._release(rec, Event.RETRY, f"gang {gang} grew to include {key}; planning again")
            if rec.phase == Phase.PENDING:
                self._plan(rec, now, pod)
            if rec.phase not in HOLDING:
                self.binder.event(pod, "GangUnschedulable", rec.reason)
                failed = {n: rec.reason for n in node_names}
                if rec.phase == Phase.REJECTED:
                    return FilterVerdict((), {}, failed)
                return FilterVerdict((), failed)
            slot = self.state.slot_of(key)
            if slot is None:
                slot = claim_slot(self.state, gang, key, gpus)
                if slot is not None:
                    # A member created after planning is a member all the same: deleting it
                    # must release the gang like deleting any other.
                    rec.members = (*rec.members, key)
            if slot is None:
                reason = (f"gang {gang} has {rec.quorum} planned GPU members and every slot is taken; "
                          f"pod {key} is one too many (set railyard.io/min-member)")
                return FilterVerdict((), {}, {n: reason for n in node_names})
            if slot.node in node_names:
                where = _where(self.state, rec.placement)
                reason = f"gang {gang} reserved node {slot.node} for {key} ({where})"
                return FilterVerdict((slot.node,), {n: reason for n in node_names if n != slot.node})
            rec.steer_misses += 1
            reason = (f"node {slot.node} planned for {key} (gang {gang}) was rejected by kube-scheduler's "
                      f"own filters ({rec.steer_misses}/{self.settings.gangs.steer_misses_before_replan} "
                      f"before planning again)")
            if rec.steer_misses >= self.settings.gangs.steer_misses_before_replan and rec.phase == Phase.PLANNED:
                self._release(rec, Event.RETRY, reason)
            return FilterVerdict((), {n: reason for n in node_names})

    def _filter_single(self, gpus: int, node_names: list[str]) -> FilterVerdict:
        passed, failed = [], {}
        snap = self.state.snapshot()
        index = snap.topology.index
        for name in node_names:
            i = index.get(name)
            if i is None:
                passed.append(name)  # not in the cache yet: the scheduler's own fit check decides
                continue
            free = snap.free[i]
            if free >= gpus and snap.blocked[i] is None:
                passed.append(name)
                continue
            if snap.blocked[i] is not None:
                failed[name] = f"node(s) {snap.blocked[i]}; pod needs {gpus} GPUs"
                continue
            reserved = snap.reserved[i]
            # No node name: kube-scheduler counts identical reasons ("39 node(s) have ..."), and
            # one distinct reason per node made the pod's condition list every node.
            failed[name] = (f"node(s) have {max(free, 0)} free GPUs ({reserved} reserved for gangs); "
                            f"pod needs {gpus}")
        return FilterVerdict(tuple(passed), failed)

    def prioritize(self, pod: dict, node_names: list[str]) -> list[tuple[str, int]]:
        gpus = ko.pod_gpus(pod, self.gpu)
        with self._cond:
            key = ko.pod_key(pod)
            slot = self.state.slot_of(key)
            if slot is not None:
                return [(n, 10 if n == slot.node else 0) for n in node_names]
            if gpus == 0:
                return [(n, 0) for n in node_names]
            snap = self.state.snapshot()
            index, free, nodes = snap.topology.index, snap.free, snap.topology.nodes
            # Best fit: the fewer GPUs a pod leaves free on a node, the higher the score
            # (0..10 in steps of the node's GPU count; unknown nodes and GPU-less nodes score 0).
            get = index.get
            scores = []
            for name in node_names:
                i = get(name)
                total = nodes[i].gpus if i is not None else 0
                leftover = free[i] - gpus if total else 0
                scores.append((name, 0 if not total else 10 if leftover <= 0 else 10 - 10 * leftover // total))
            return scores

    # -- planning ---------------------------------------------------------------------------

    def _gang(self, key: str, now: float) -> GangRecord:
        rec = self._gangs.get(key)
        if rec is None:
            rec = self._gangs[key] = GangRecord(key, now, on_step=self._stepped)
            self._publish(rec, None, None)
        return rec

    def _plan(self, rec: GangRecord, now: float, pod: dict) -> None:
        members = [p for p in self._pending.of_gang(rec.key) if _uid_of(p) not in rec.bound_uids]
        if not any(ko.pod_key(p) == ko.pod_key(pod) for p in members):
            members.append(pod)
        members.sort(key=lambda p: ko.pod_key(p))
        spec = ko.gang_spec(rec.key, members, self._podgroups, self.gpu,
                            self.settings.gangs.default_timeout_seconds)
        missing = spec.min_member - len(spec.members)
        running = sum(1 for gang, _ in self._bound.values() if gang == rec.key) if missing > 0 else 0
        if running:
            # Replacements for members of a gang that runs (a pod deleted and created again by
            # its controller): the running members count toward minMember, else the round
            # would wait for placeholders nobody will fill, timing out forever.
            spec = replace(spec, min_member=max(len(spec.members), spec.min_member - running))
        rec.sized = ko.is_sized(members, self._podgroups.get(rec.key))
        started = time.perf_counter()
        result = plan(spec, self.state.snapshot())
        self.observer.plan_seconds(time.perf_counter() - started)
        topo = self.state.topology
        rec.at_bind.clear()
        rec.results.clear()
        rec.steer_misses = 0
        if isinstance(result, NoPlacement):
            rec.reason = explain_no_placement(topo, result)
            rec.placement = None
            rec.step(Event.INVALID if result.invalid else Event.UNPLACEABLE)
            if rec.phase == Phase.REJECTED:
                self.observer.gang_finished("rejected")
            return
        rec.deadline = now + spec.timeout_seconds
        rec.placement = result
        rec.members = tuple(m.key for m in spec.members)
        rec.quorum = sum(1 for s in result.slots if s.gpus > 0)
        rec.reason = explain_placement(topo, result)
        self.state.reserve(Reservation(rec.key, tuple(s for s in result.slots if s.gpus > 0), rec.deadline))
        rec.step(Event.PLANNED)
        self._report_reservations()

    def _release(self, rec: GangRecord, event: Event, reason: str) -> None:
        self.state.release(rec.key)
        rec.reason = reason
        rec.step(event)
        rec.round += 1
        rec.at_bind.clear()
        self._report_reservations()
        self._cond.notify_all()

    GC_INTERVAL = 60.0

    def _collect(self, now: float) -> None:
        """Forget gangs that hold nothing and have no pod left waiting (bounded memory)."""
        if now < self._next_gc:
            return
        self._next_gc = now + self.GC_INTERVAL
        for key, rec in list(self._gangs.items()):
            if rec.phase in HOLDING or self._pending.has_gang(key):
                continue
            if rec.bound_at is not None and now - rec.bound_at < self.GC_INTERVAL:
                continue
            del self._gangs[key]

    def _expire(self, now: float) -> None:
        for key in self.state.expired(now):
            rec = self._gangs.get(key)
            if rec is not None and rec.phase in (Phase.PLANNED, Phase.WAITING):
                self._time_out(rec)
            elif rec is None:
                # A bound round's leftover slots (``<gang>#bound-N``): pods the watch never showed.
                self.state.release(key)
                self._report_reservations()

    def _time_out(self, rec: GangRecord) -> None:
        waiting = len(rec.at_bind)
        missing = [m for m in rec.members if m not in rec.at_bind]
        reason = (f"gang {rec.key} timed out at bind: {waiting}/{rec.quorum} GPU members arrived within "
                  f"{_seconds(rec)}; not arrived: {', '.join(missing[:5]) or 'members not created yet'}"
                  f"{' ...' if len(missing) > 5 else ''}")
        self._release(rec, Event.DEADLINE, reason)
        self.observer.gang_finished("timed_out")

    def _report_reservations(self) -> None:
        res = self.state.reservations()
        self.observer.reservations(len(res), sum(r.gpus for r in res.values()))

    # -- bind: the gang's permit gate ---------------------------------------------------------

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        key = f"{namespace}/{name}"
        with self._cond:
            now = self.clock()
            self._expire(now)
            seen = self._seen.get(key)
            if seen is None:
                pod = self._pending.get(key)
                if pod is None:
                    raise BindRefused(f"pod {key} is unknown to railyard (not seen by filter, not in the "
                                      f"cache); the scheduler will retry it")
                gang, named = ko.group_key(pod)
            else:
                gang, named, _ = seen
            rec = self._gangs.get(gang) if named else None
        if rec is None:
            self._bind_one(namespace, name, uid, node)
            return
        with self._cond:
            if rec.phase not in (Phase.PLANNED, Phase.WAITING):
                raise GangReleased(f"gang {gang} is {rec.phase.value}, not planned: {rec.reason}")
            slot = self.state.slot_of(key)
            if slot is None or slot.node != node:
                planned = slot.node if slot else "no node"
                raise BindRefused(f"pod {key} was sent to bind on {node} but gang {gang} planned {planned}")
            rec.at_bind[key] = (uid, node)
            round_ = rec.round
            if len(rec.at_bind) < rec.quorum:
                rec.step(Event.MEMBER_AT_BIND)
                self._wait(rec, key, round_)
                return
            rec.step(Event.QUORUM)
            members = dict(rec.at_bind)
        self._bind_gang(rec, members, round_)
        with self._cond:
            error = rec.results.get(key)
        if error:
            raise BindingFailed(error)

    def _wait(self, rec: GangRecord, key: str, round_: int) -> None:
        """Hold this bind call until the gang's Bindings are done or its round ends."""
        while True:
            if key in rec.results and rec.round == round_:
                if rec.results[key]:
                    raise BindingFailed(rec.results[key])
                return
            if rec.round != round_:
                if rec.phase == Phase.TIMED_OUT:
                    raise GangTimedOut(rec.reason)
                raise GangReleased(rec.reason)
            remaining = (rec.deadline or 0) - self.clock()
            if remaining <= 0 and rec.phase in (Phase.PLANNED, Phase.WAITING):
                self._time_out(rec)
                continue
            self._cond.wait(timeout=max(min(remaining, 1.0), 0.01))

    def _bind_gang(self, rec: GangRecord, members: dict[str, tuple[str, str]], round_: int) -> None:
        """Create every member's Binding at once; if some fail after retries, evict the rest."""
        def attempt(item: tuple[str, tuple[str, str]]) -> tuple[str, str]:
            key, (uid, node) = item
            ns, name = key.split("/", 1)
            error = ""
            for i in range(self.settings.gangs.bind_attempts):
                try:
                    self.binder.bind(ns, name, uid, node)
                    return key, ""
                except Exception as exc:  # the binder's errors carry the API server's words
                    error = f"binding {key} to {node} failed: {exc}"
                    self.observer.binding_failed()
                    time.sleep(0.05 * 2 ** i)
            return key, error

        with ThreadPoolExecutor(max_workers=min(32, len(members))) as pool:
            results = dict(pool.map(attempt, members.items()))
        failed = {k: e for k, e in results.items() if e}
        with self._cond:
            now = self.clock()
            if not failed:
                rec.results = dict(results)
                rec.bound_at = now
                rec.bound_uids.update(uid for uid, _ in members.values())
                for key in members:
                    self._pending.pop(key)
                rec.reason = f"gang {rec.key} bound: {len(members)} pods"
                rec.step(Event.BOUND)
                self.observer.gang_finished("bound")
                self.observer.gang_time_to_bind(now - rec.first_seen)
                # Slots are consumed as the watch shows each pod bound; until then they stay
                # reserved, under a key of their own so that a next round of the gang (a new
                # member, filtered before the watch caught up) can plan; dropped after 30 s.
                leftover = self.state.release(rec.key)
                if leftover is not None:
                    self.state.reserve(Reservation(f"{rec.key}#bound-{next(self._leftovers)}",
                                                   leftover.slots, now + 30.0))
                self._cond.notify_all()
                return
            # Compensate: never leave part of a gang bound. Evict the members bound so the gang
            # restarts whole; their controllers create new pods, which are planned again.
            for key in results:
                if not results[key]:
                    ns, name = key.split("/", 1)
                    try:
                        self.binder.delete_pod(ns, name, members[key][0])
                    except Exception as exc:
                        failed[key] = f"evicting {key} after a failed gang bind failed too: {exc}"
            first = next(iter(failed.values()))
            reason = (f"gang {rec.key}: {len(failed)}/{len(members)} Bindings failed ({first}); "
                      f"{len(members) - len(failed)} bound members evicted so the gang restarts whole")
            rec.results = {k: reason for k in members}
            self.state.release(rec.key)
            rec.reason = reason
            rec.step(Event.BIND_FAILED)
            self.observer.gang_finished("compensated")
            self._report_reservations()
            self._cond.notify_all()

    def _bind_one(self, namespace: str, name: str, uid: str, node: str) -> None:
        error = ""
        for i in range(self.settings.gangs.bind_attempts):
            try:
                self.binder.bind(namespace, name, uid, node)
                return
            except Exception as exc:
                error = str(exc)
                self.observer.binding_failed()
                time.sleep(0.05 * 2 ** i)
        raise BindingFailed(f"binding {namespace}/{name} to {node} failed: {error}")

    # -- preempt ------------------------------------------------------------------------------

    def preempt(self, pod: dict, victims: dict[str, list[str]]) -> dict[str, list[str]]:
        """Keep only candidate nodes whose eviction breaks no running gang and frees GPUs that
        are not reserved for another gang.

        - A victim that belongs to a gang of several pods vetoes the node, unless every bound
          member of that gang is among this node's victims.
        - After the victims leave, the node must have the pod's GPUs free without touching GPUs
          reserved for other gangs (or the pod's own planned slot must be on it).
        """
        gpus = ko.pod_gpus(pod, self.gpu)
        key = ko.pod_key(pod)
        with self._cond:
            own = self.state.slot_of(key)
            by_gang: dict[str, set[str]] = {}
            for uid, (gang, _) in self._bound.items():
                by_gang.setdefault(gang, set()).add(uid)
            kept = {}
            for node, uids in victims.items():
                chosen = set(uids)
                broken = [g for uid in uids if (g := self._bound.get(uid, (None,))[0])
                          and len(by_gang[g]) > 1 and not by_gang[g] <= chosen]
                if broken:
                    continue
                freed = sum(u.gpus for uid in uids if (u := self.state._pods.get(uid)) and u.node == node)
                free = self.state.free(node) + freed + (own.gpus if own and own.node == node else 0)
                if gpus and free < gpus:
                    continue
                kept[node] = list(uids)
            return kept

    # -- explain ------------------------------------------------------------------------------

    def debug_gangs(self) -> list[dict]:
        with self._cond:
            now = self.clock()
            out = []
            for rec in self._gangs.values():
                phase = rec.phase.value
                if rec.phase == Phase.WAITING:
                    phase = f"waiting at bind {len(rec.at_bind)}/{rec.quorum}"
                held = self.state.reservation(rec.key) if rec.phase in (Phase.PLANNED, Phase.WAITING) else None
                slots = held.slots if held else rec.placement.slots if rec.placement else ()
                out.append({
                    "gang": rec.key,
                    "phase": phase,
                    "plan": {s.member: s.node for s in slots},  # members that came later by name
                    "deadline_in_seconds": round(rec.deadline - now, 1) if rec.deadline and rec.phase in HOLDING else None,
                    "reason": rec.reason,
                })
            return out


    # -- explain, what-if and watch (the gRPC API) -------------------------------------------

    def explain(self, pod_key: str) -> dict | None:
        """Why a pod waits: its gang's phase and reason, the plan, and how much of the gang each
        domain at the gang's bound level holds. The gang's own reservation is given back for
        the table, so it shows what the gang could get now. None: railyard never saw the pod.
        """
        with self._cond:
            now = self.clock()
            self._expire(now)
            pod = self._pending.get(pod_key)
            if pod is not None:
                gang, named = ko.group_key(pod)
            elif pod_key in self._seen:
                gang, named, _ = self._seen[pod_key]
            else:
                bound = next((g for g, k in self._bound.values() if k == pod_key), None)
                if bound is None:
                    return None
                gang, named = bound, True
            rec = self._gangs.get(gang) if named else None
            members = sorted(self._pending.of_gang(gang), key=ko.pod_key)
            out: dict[str, Any] = {
                "pod": pod_key, "gang": gang, "phase": Phase.PENDING.value if pod is not None else "bound",
                "reason": "", "plan": {}, "quorum": 0, "at_bind": 0, "deadline_in_seconds": 0.0,
                "pods": 0, "level": "", "fit": [],
            }
            if rec is not None:
                out.update(phase=rec.phase.value, reason=rec.reason, quorum=rec.quorum, at_bind=len(rec.at_bind))
                if rec.placement is not None and rec.phase in HOLDING:
                    out["plan"] = {s.member: s.node for s in rec.placement.slots}
                if rec.deadline is not None and rec.phase in HOLDING:
                    out["deadline_in_seconds"] = round(max(rec.deadline - now, 0.0), 1)
            if not members:
                return out
            spec = ko.gang_spec(gang, members, self._podgroups, self.gpu, self.settings.gangs.default_timeout_seconds)
            with self._own_reservation_returned(gang):
                topo = self.state.topology
                bound_level, rows = domain_fits(spec, self.state.snapshot())
                if rec is None:
                    # Never filtered as a gang: say so, and what planning it now would give.
                    now_plan = _answer(self.state, plan(spec, self.state.snapshot()), set()).reason
                    if pod_key in self._seen:
                        why = f"pod {pod_key} names no gang: filter checks free GPUs node by node, nothing is reserved"
                    else:
                        why = (f"not planned yet: kube-scheduler has not sent {pod_key} to railyard's filter (check "
                               f"spec.schedulerName and that the scheduler's extender config points at railyard)")
                    out["reason"] = f"{why}; planned now: {now_plan}"
            out["pods"] = len(spec.demand())
            out["level"] = topo.level_key(bound_level) or ""
            out["fit"] = [{"domain": list(r.domain.path), "nodes": r.nodes, "gpus": r.gpus,
                           "available_gpus": r.available, "fits": r.fits, "blocked_nodes": r.blocked_nodes}
                          for r in rows]
            return out

    def plan_gang(self, pods: Sequence[Mapping[str, Any]]) -> list[GangAnswer]:
        """What-if for the gangs of ``pods`` against the live state, reserving nothing: each
        gang is planned alone, with its own reservation (if it holds one) given back.
        """
        with self._cond:
            answers = []
            for key, members in ko.group_pods(pods).items():
                spec = ko.gang_spec(key, members, self._podgroups, self.gpu, self.settings.gangs.default_timeout_seconds)
                with self._own_reservation_returned(key):
                    result = plan(spec, self.state.snapshot())
                    answers.append(_answer(self.state, result, {ko.pod_key(p) for p in members}))
            return answers

    def watch_gangs(self, sink: Callable[[dict], None]) -> tuple[list[dict], Callable[[], None]]:
        """Subscribe ``sink`` to gang phase changes. Returns every gang as it is now (so nothing
        falls between the listing and the first change) and a function that unsubscribes.
        ``sink`` is called under the service lock: it must only enqueue.
        """
        with self._cond:
            self._watchers.append(sink)
            listing = [_gang_event(rec, None, None) for rec in self._gangs.values()]

        def unsubscribe() -> None:
            with self._cond:
                if sink in self._watchers:
                    self._watchers.remove(sink)
        return listing, unsubscribe

    def _stepped(self, rec: GangRecord, previous: Phase, event: Event) -> None:
        self._publish(rec, previous, event)

    def _publish(self, rec: GangRecord, previous: Phase | None, event: Event | None) -> None:
        if self._watchers:
            change = _gang_event(rec, previous, event)
            for sink in list(self._watchers):
                sink(change)

    @contextmanager
    def _own_reservation_returned(self, gang: str) -> Iterator[None]:
        """Plan as if ``gang`` held nothing; its reservation is restored exactly afterwards."""
        held = self.state.release(gang)
        try:
            yield
        finally:
            if held is not None:
                self.state.reserve(held)


def _gang_event(rec: GangRecord, previous: Phase | None, event: Event | None) -> dict:
    return {"gang": rec.key, "phase": rec.phase.value, "previous": previous.value if previous else "",
            "event": event.value if event else "", "reason": rec.reason}


def _name_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _uid_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) else ""


def _where(state: ClusterState, placement: Placement | None) -> str:
    if placement is None:
        return "no plan"
    topo = state.topology
    if placement.level < 0:
        return "planned across the cluster"
    return f"planned within {topo.level_key(placement.level)} {format_path(placement.domain.path)}"


def _seconds(rec: GangRecord) -> str:
    if rec.deadline is None:
        return "its timeout"
    return f"{rec.deadline - rec.first_seen:.0f}s"
