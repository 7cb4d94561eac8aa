"""The live extender's verbs over the core, with an in-memory double of the API-server ports (no transport)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import pytest
from prometheus_client import CollectorRegistry

from extender import topotext
from extender.adapters.kubeobjects import SCHEME
from extender.adapters.metrics import Metrics
from extender.core.gangs import book
from extender.core.errors import BindingFailed, GangTimedOut, GangUnreserved, NotReady, PermitRejected
from extender.core.ports import Ports
from extender.service import TopologyExtender
from extender.service.sink import DRA_KINDS
from extender.settings import GangSettings, Settings
from tests.topologies import TRANSLATE, TWO_RACKS, gang, pod


def _pod(obj):
    return TRANSLATE.pod(obj) if isinstance(obj, dict) else obj


#: Most tests here are about gangs of "the members seen" planned at their first member; the
#: wait for such gangs to settle has tests of its own (tests/service/test_conventions.py).
SETTINGS = Settings(gangs=GangSettings(settle_seconds=0))


class Extender(TopologyExtender):
    """The service, fed Kubernetes objects the way its adapters feed it: translated first
    (facts, as the gRPC servicer passes them, go through unchanged)."""

    def __init__(self, settings=SETTINGS, binder=None, clock=None, kinds=("nodes", "pods", "podgroups")):
        super().__init__(settings, ports(binder), clock=clock or Clock(), sleep=lambda s: None, kinds=kinds)

    def relisted(self, kind, objects):
        if kind in DRA_KINDS:  # given as facts
            return super().relisted(kind, objects)
        translate = {"nodes": TRANSLATE.node, "pods": TRANSLATE.pod}.get(kind, lambda o: TRANSLATE.group(o, kind))
        super().relisted(kind, [translate(o) for o in objects])

    def pod_upserted(self, pod):
        super().pod_upserted(_pod(pod))

    def pod_deleted(self, pod):
        super().pod_deleted(_pod(pod))

    def filter(self, pod, node_names):
        return super().filter(_pod(pod), node_names)

    def filter_now(self, pod, node_names):
        return super().filter_now(_pod(pod), node_names)

    def prioritize(self, pod, node_names):
        return super().prioritize(_pod(pod), node_names)

    def preempt(self, pod, victims):
        return super().preempt(_pod(pod), victims)

    def plan_gang(self, pods):
        return super().plan_gang([_pod(p) for p in pods])


def ports(binder):
    """Every API-server port served by one in-memory double, as the one KubeBinder serves them."""
    return Ports(bindings=binder, evictions=binder, events=binder, claims=binder, scheme=SCHEME)


class MemoryBinder:
    """Records Bindings instead of POSTing them; can be told to fail for some pods."""

    def __init__(self, fail: set[str] = frozenset(), fail_mark: set[str] = frozenset()):
        self.bound: list[tuple[str, str]] = []
        self.deleted: list[str] = []
        self.events: list[tuple[str, str]] = []
        self.told: list[tuple[str, str]] = []
        """(pod, reason) of every Event."""
        self.marks: dict[str, object] = {}
        self.fail = set(fail)
        self.fail_mark = set(fail_mark)
        self.lock = threading.Lock()

    def mark_all(self, marks):
        outcomes = []
        for pod, mark in marks:
            if pod.key in self.fail_mark:
                outcomes.append(RuntimeError("the object has been modified; please apply your changes to the latest version"))
                continue
            with self.lock:
                self.marks[pod.key] = mark
            outcomes.append(None)
        return outcomes

    def bind_all(self, bindings):
        outcomes = []
        for pod, node in bindings:
            if pod.key in self.fail:
                outcomes.append(RuntimeError("Operation cannot be fulfilled: precondition failed"))
                continue
            with self.lock:
                self.bound.append((pod.key, node))
            outcomes.append(None)
        return outcomes

    async def bind_async(self, pod, node):
        return self.bind_all([(pod, node)])[0]

    def delete_pod(self, pod):
        self.deleted.append(pod.key)

    def event(self, pod, reason, message, type_="Warning"):
        self.events.append((reason, message))
        self.told.append((pod.key, reason))


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def extender(drawing=TWO_RACKS, fail=frozenset(), settings=SETTINGS):
    binder, clock = MemoryBinder(fail), Clock()
    ext = Extender(settings, binder, clock=clock)
    spec = topotext.load(drawing)
    ext.relisted("nodes", spec.nodes)
    ext.relisted("pods", spec.filler_pods())
    ext.relisted("podgroups", [])
    return ext, binder, clock


BLOCKED_SMALL = "rack r1: c1[8/8 cordoned] c2\n"
NODES = ["h1", "h2", "h3", "h4", "h5", "h6"]


def create(ext, pods):
    """What the watch shows when a controller creates the pods."""
    for p in pods:
        ext.pod_upserted(p)


def steer(ext, pods):
    """Create, then filter every member; return {pod key: the one node it may go to}."""
    create(ext, pods)
    out = {}
    for p in pods:
        v = ext.filter(p, NODES)
        assert len(v.node_names) == 1, v
        out[f"ml/{p['metadata']['name']}"] = v.node_names[0]
    return out


def bind_async(ext, p, node, errors):
    def run():
        try:
            ext.bind("ml", p["metadata"]["name"], p["metadata"]["uid"], node)
        except Exception as exc:
            errors[p["metadata"]["name"]] = exc
    t = threading.Thread(target=run)
    t.start()
    return t


def wait_until(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.01)


def test_gang_binds_all_at_once_and_not_before():
    ext, binder, _ = extender()
    pods = gang("g", 3, 8, annotations={"railyard.io/min-member": "3"})
    plan = steer(ext, pods)
    assert set(plan.values()) == {"h1", "h2", "h3"}  # one rack (r1)
    errors = {}
    threads = [bind_async(ext, p, plan[f"ml/{p['metadata']['name']}"], errors) for p in pods[:2]]
    wait_until(lambda: "waiting at bind 2/3" in ext.debug_gangs()[0].phase)
    assert binder.bound == []  # nobody bound before the whole gang is held
    ext.bind("ml", "g-2", "uid-ml-g-2", plan["ml/g-2"])
    for t in threads:
        t.join(5)
    assert errors == {}
    assert sorted(binder.bound) == sorted(plan.items())
    assert ext.debug_gangs()[0].phase == "bound"


def test_filter_reasons_name_the_reserved_node():
    ext, _, _ = extender()
    pods = gang("g", 2, 8)
    create(ext, pods)
    v = ext.filter(pods[0], NODES)
    assert v.node_names == ("h1",)
    assert v.failed["h5"] == ("gang ml/g reserved node h1 for ml/g-0 (planned within "
                              "network.topology.nvidia.com/accelerator b1/r1/n1)")


def test_deadline_releases_everything_and_binds_nothing():
    ext, binder, clock = extender()
    pods = gang("g", 2, 8, annotations={"railyard.io/timeout-seconds": "30"})
    create(ext, pods)
    plan = steer(ext, pods[:1])
    errors = {}
    t = bind_async(ext, pods[0], plan["ml/g-0"], errors)
    wait_until(lambda: ext.debug_gangs()[0].phase.startswith("waiting"))
    clock.now += 31
    t.join(5)
    assert isinstance(errors["g-0"], GangTimedOut)
    assert str(errors["g-0"]) == ("gang ml/g timed out at bind: 1/2 GPU members arrived within 30s; "
                                  "not arrived: ml/g-1")
    assert binder.bound == []
    assert ext.ctx.state.reservations() == {}
    # The scheduler retries: the gang is planned again.
    assert len(ext.filter(pods[0], NODES).node_names) == 1


def test_member_deleted_while_waiting_releases_and_replans():
    ext, binder, _ = extender()
    pods = gang("g", 2, 8)
    plan = steer(ext, pods)
    errors = {}
    t = bind_async(ext, pods[0], plan["ml/g-0"], errors)
    wait_until(lambda: ext.debug_gangs()[0].phase.startswith("waiting"))
    ext.pod_deleted(pods[1])
    t.join(5)
    assert isinstance(errors["g-0"], GangUnreserved)
    assert "member ml/g-1 was deleted" in str(errors["g-0"])
    assert binder.bound == [] and ext.ctx.state.reservations() == {}


def test_failed_binding_evicts_the_bound_members():
    ext, binder, _ = extender(fail={"ml/g-1"})
    pods = gang("g", 2, 8)
    plan = steer(ext, pods)
    errors = {}
    t = bind_async(ext, pods[0], plan["ml/g-0"], errors)
    wait_until(lambda: ext.debug_gangs()[0].phase.startswith("waiting"))
    with pytest.raises(BindingFailed) as err:
        ext.bind("ml", "g-1", "uid-ml-g-1", plan["ml/g-1"])
    t.join(5)
    assert "1/2 Bindings failed" in str(err.value) and "1 bound members evicted" in str(err.value)
    assert binder.deleted == ["ml/g-0"]
    assert ext.ctx.state.reservations() == {}


def test_second_big_gang_holds_nothing_until_the_first_finishes():
    ext, binder, _ = extender("rack r1: a b c d e\n")
    first, second = gang("a", 3, 8), gang("b", 3, 8)
    create(ext, first + second)
    names = ["a", "b", "c", "d", "e"]
    plan = {}
    for p in first:
        plan[p["metadata"]["name"]] = ext.filter(p, names).node_names[0]
    v = ext.filter(second[0], names)
    assert v.node_names == ()
    assert v.failed["a"] == ("gang ml/b needs 3 pods x 8 GPUs; the cluster fits 2 "
                             "(24 GPUs reserved for other gangs)")
    assert ext.ctx.state.reservation("ml/b") is None  # no partial holding: no deadlock
    errors = {}
    threads = [bind_async(ext, p, plan[p["metadata"]["name"]], errors) for p in first]
    for t in threads:
        t.join(5)
    assert errors == {} and len(binder.bound) == 3
    for p in first:  # the watch shows them bound, then finished
        p["spec"]["nodeName"] = plan[p["metadata"]["name"]]
        p["status"]["phase"] = "Running"
        ext.pod_upserted(p)
    assert ext.filter(second[0], names).node_names == ()
    for p in first:
        p["status"]["phase"] = "Succeeded"
        ext.pod_upserted(p)
    assert len(ext.filter(second[0], names).node_names) == 1


def test_single_pods_avoid_reserved_gpus_and_pack_best_fit():
    ext, _, _ = extender()
    steer(ext, gang("g", 2, 8))  # reserves h1 h2
    v = ext.filter(pod("solo", 2), NODES[:5])  # kube-scheduler's fit check drops h6 (0 free)
    assert set(v.node_names) == {"h3", "h4", "h5"}
    assert v.failed["h1"] == "node(s) have 0 free GPUs (8 reserved for gangs); pod needs 2"
    assert v.failed["h2"] == v.failed["h1"]  # one line in kube-scheduler's message, not one per node
    scores = dict(ext.prioritize(pod("solo", 2), list(v.node_names)))
    # Best fit: h4 (2 free, none left over) scores 10, h3 and h5 (6 left of 8) 10 - 60 // 8 = 3;
    # lowered by the lowest score, the 3s are 0 and not listed (unlisted hosts score 0).
    assert scores == {"h4": 7}


def test_single_pod_filter_trusts_kube_schedulers_fit_on_nodes_without_reservations():
    ext, _, _ = extender()
    # h6 has 0 of 8 GPUs free in railyard's cache; kube-scheduler, which counts the pods it has
    # assumed and sees deletions first, sent it as fitting: railyard has nothing to add there.
    assert ext.filter(pod("solo", 2), NODES).node_names == tuple(NODES)
    steer(ext, gang("g", 2, 8))  # reserves h1 h2
    v = ext.filter(pod("solo", 2), ["h6", "h2", "h3"])
    assert v.node_names == ("h6", "h3") and set(v.failed) == {"h2"}


def test_prioritize_lists_only_hosts_above_the_lowest_score():
    ext, _, _ = extender()
    assert ext.prioritize(pod("solo", 8), ["h1", "h2", "h3", "h5"]) == []  # all empty: all equal
    assert ext.prioritize(pod("cpu", 0), NODES) == []


def test_pods_without_gpus_pass_at_once():
    ext, _, _ = extender()
    assert ext.filter(pod("cpu", 0), NODES).node_names == tuple(NODES)


def test_invalid_gang_is_unresolvable_with_its_reason():
    ext, binder, _ = extender()
    pods = gang("g", 1, 8, annotations={"railyard.io/min-member": "x"})
    create(ext, pods)  # Events are only about pods the watch shows
    v = ext.filter(pods[0], NODES)
    assert v.node_names == () and v.failed == {}
    assert "railyard.io/min-member must be a positive integer, got 'x'" in v.failed_unresolvable["h1"]
    assert binder.events and binder.events[0][0] == "GangUnschedulable"


def test_bind_of_an_unknown_pod_is_refused():
    ext, _, _ = extender()
    with pytest.raises(PermitRejected, match="unknown to railyard"):
        ext.bind("ml", "ghost", "uid", "h1")


def test_a_lone_pod_is_filtered_and_bound_without_waiting_a_planned_gang_member_is_not():
    ext, binder, _ = extender(settings=Settings(gangs=GangSettings(settle_seconds=0, bind_attempts=2)))
    metrics = Metrics(CollectorRegistry())
    ext.ctx.ports = dataclasses.replace(ext.ctx.ports, observer=metrics)
    solo = pod("solo", 1)
    assert ext.filter_now(solo, NODES).node_names == tuple(NODES)
    asyncio.run(ext.bind_now("ml", "solo", "uid-solo", "h2"))
    assert binder.bound == [("ml/solo", "h2")]
    with pytest.raises(PermitRejected, match="unknown to railyard"):
        ext.bind_now("ml", "ghost", "uid", "h1")
    member = gang("g", 2, 8)[0]
    create(ext, gang("g", 2, 8))
    assert len(ext.filter_now(member, NODES).node_names) == 1  # planned: now held at the gate
    assert ext.bind_now("ml", member["metadata"]["name"], member["metadata"]["uid"], "h1") is None
    binder.fail.add("ml/late")
    ext.filter(pod("late", 1), NODES)
    with pytest.raises(BindingFailed, match="^binding ml/late to h3 failed: Operation cannot be fulfilled: precondition failed$"):
        asyncio.run(ext.bind_now("ml", "late", "uid-late", "h3"))
    assert metrics.registry.get_sample_value("railyard_binding_failures_total") == 2  # each attempt


def test_nothing_is_answered_now_while_the_service_lock_is_held_elsewhere():
    ext, binder, _ = extender()
    ext.filter(pod("solo", 1), NODES)
    held, release = threading.Event(), threading.Event()

    def holder():
        with ext.ctx.cond:
            held.set()
            release.wait(5)
    t = threading.Thread(target=holder)
    t.start()
    held.wait(5)
    try:
        assert ext.filter_now(pod("solo", 1), NODES) is None
        assert ext.bind_now("ml", "solo", "uid-solo", "h2") is None
    finally:
        release.set()
        t.join()
    assert binder.bound == []


def test_bind_on_another_node_than_planned_is_refused():
    ext, binder, _ = extender()
    pods = gang("g", 2, 8)
    steer(ext, pods)
    with pytest.raises(PermitRejected, match="planned h1"):
        ext.bind("ml", "g-0", "uid-ml-g-0", "h5")
    assert binder.bound == []


def test_preempt_never_breaks_a_running_gang():
    ext, _, _ = extender("rack r1: a b\n")
    running = gang("run", 2, 8)
    for p, node in zip(running, "ab"):
        p["spec"]["nodeName"] = node
        p["status"]["phase"] = "Running"
        ext.pod_upserted(p)
    solo = pod("solo", 8, node="b")
    solo["metadata"]["uid"] = "uid-solo"
    victims = {"a": ["uid-ml-run-0"], "b": ["uid-ml-run-1"]}
    assert ext.preempt(pod("hi", 8), victims) == {}
    both = {"a": ["uid-ml-run-0", "uid-ml-run-1"]}
    assert ext.preempt(pod("hi", 8), both) == both


def test_not_ready_until_every_kind_is_listed():
    ext = Extender(SETTINGS, MemoryBinder())
    assert not ext.ready()
    ext.relisted("nodes", [])
    ext.relisted("pods", [])
    assert not ext.ready()
    ext.relisted("podgroups", [])  # the watch cache's answer when the CRD is not served
    assert ext.ready()


def test_next_round_after_a_bound_gang_is_planned_before_the_watch_shows_it_bound():
    # kube-scheduler may filter a new member of a gang right after railyard's Bindings returned,
    # before the watch shows the bound pods (found by tests/e2e/test_gangs.py's unsized gang):
    # the bound round's leftover slots must neither block the new plan nor join it.
    ext, binder, _ = extender()
    pods = gang("g", 2, 8)  # no min-member: the gang is the members seen
    plan = steer(ext, pods)
    errors = {}
    for t in [bind_async(ext, p, plan[f"ml/{p['metadata']['name']}"], errors) for p in pods]:
        t.join(5)
    assert errors == {} and len(binder.bound) == 2
    (late,) = gang("g", 1, 8, start=2)
    create(ext, [late])
    v = ext.filter(late, NODES)  # was: ValueError, gang ml/g already holds a reservation
    assert len(v.node_names) == 1 and v.node_names[0] not in plan.values()
    t = bind_async(ext, late, v.node_names[0], errors)
    t.join(5)
    assert not t.is_alive() and errors == {}  # a round of one: the bound members are not waited for
    assert binder.bound[-1] == ("ml/g-2", v.node_names[0])


def test_no_gang_is_planned_before_the_pods_are_listed():
    # After a start (a kill -9 and restart included) railyard serves while its lists run, one
    # thread per kind: with nodes listed and pods not yet, a plan would promise GPUs in use.
    ext = Extender(SETTINGS, MemoryBinder(), clock=Clock())
    spec = topotext.load(TWO_RACKS)
    ext.relisted("nodes", spec.nodes)
    pods = gang("g", 2, 8)
    with pytest.raises(NotReady, match="still listing podgroups, pods after a start; gang ml/g"):
        ext.filter(pods[0], NODES)
    assert ext.ctx.state.reservations() == {}
    assert ext.filter(pod("one", 1), NODES).node_names  # pods outside gangs are not held up
    ext.relisted("pods", spec.filler_pods() + pods)
    ext.relisted("podgroups", [])
    assert len(ext.filter(pods[0], NODES).node_names) == 1


def test_finished_gangs_are_forgotten():
    ext, binder, clock = extender()
    pods = gang("g", 2, 8)
    plan = steer(ext, pods)
    errors = {}
    for t in [bind_async(ext, p, plan[f"ml/{p['metadata']['name']}"], errors) for p in pods]:
        t.join(5)
    assert [g.phase for g in ext.debug_gangs()] == ["bound"]
    v = ext.filter(gang("other", 1, 1)[0], NODES)  # a later call, within a minute: still listed
    assert any(g.gang == "ml/g" for g in ext.debug_gangs()) and v.node_names
    clock.now += 2 * book.GC_SECONDS
    ext.filter(pod("solo", 1), NODES)
    assert not any(g.gang == "ml/g" for g in ext.debug_gangs())


def test_a_replacement_member_of_a_running_gang_binds_at_once():
    # A controller recreates a deleted member of a running gang: the running members count
    # toward min-member (found by e2e: the replacement waited for 3 placeholders forever).
    ext, binder, _ = extender()
    pods = gang("g", 3, 8, annotations={"railyard.io/min-member": "3"})
    plan = steer(ext, pods)
    errors = {}
    for t in [bind_async(ext, p, plan[f"ml/{p['metadata']['name']}"], errors) for p in pods]:
        t.join(5)
    for p in pods:  # the watch shows them bound and running
        p["spec"]["nodeName"] = plan[f"ml/{p['metadata']['name']}"]
        p["status"]["phase"] = "Running"
        ext.pod_upserted(p)
    ext.pod_deleted(pods[2])
    (again,) = gang("g", 1, 8, annotations={"railyard.io/min-member": "3"}, start=2)
    again["metadata"]["uid"] = "uid-ml-g-2-again"
    create(ext, [again])
    v = ext.filter(again, NODES)
    assert len(v.node_names) == 1
    t = bind_async(ext, again, v.node_names[0], errors)
    t.join(5)
    assert not t.is_alive() and errors == {}
    assert binder.bound[-1] == ("ml/g-2", v.node_names[0])
    assert ext.ctx.state.reservations().keys() <= {k for k in ext.ctx.state.reservations() if "#bound" in k}


def test_deleting_a_member_that_took_a_placeholder_slot_releases_the_gang():
    # min-member 3 planned when only g-0 existed; g-1 came later and took a placeholder slot,
    # reached bind, then was deleted: the gang must be released (found by e2e: the held binds
    # stayed until the deadline, counting the deleted pod as arrived).
    ext, binder, _ = extender()
    pods = gang("g", 3, 8, annotations={"railyard.io/min-member": "3"})
    plan = steer(ext, pods[:1])
    plan.update(steer(ext, pods[1:2]))
    errors = {}
    threads = [bind_async(ext, p, plan[f"ml/{p['metadata']['name']}"], errors) for p in pods[:2]]
    wait_until(lambda: "waiting at bind 2/3" in ext.debug_gangs()[0].phase)
    assert {"ml/g-0", "ml/g-1"} <= ext.debug_gangs()[0].plan.keys()
    ext.pod_deleted(pods[1])
    for t in threads:
        t.join(5)
    assert isinstance(errors["g-0"], GangUnreserved) and "member ml/g-1 was deleted" in str(errors["g-0"])
    assert binder.bound == [] and ext.ctx.state.reservations() == {}


def test_configured_default_timeout_applies_to_gangs_that_name_none():
    binder, clock = MemoryBinder(), Clock()
    settings = Settings(gangs=GangSettings(default_timeout_seconds=5.0, settle_seconds=0))
    ext = Extender(settings, binder, clock=clock)
    spec = topotext.load(TWO_RACKS)
    ext.relisted("nodes", spec.nodes)
    ext.relisted("pods", spec.filler_pods())
    ext.relisted("podgroups", [])
    create(ext, gang("g", 2, 8))
    ext.filter(gang("g", 2, 8)[0], NODES)
    assert ext.debug_gangs()[0].deadline_in_seconds == 5.0


def test_cordoned_node_reason_says_so():
    ext, _, _ = extender(BLOCKED_SMALL)
    v = ext.filter(pod("solo", 8), ["c1", "c2"])
    assert v.node_names == ("c2",)
    assert v.failed["c1"] == "node(s) cordoned; pod needs 8 GPUs"


def test_preempt_keeps_a_node_without_victims_only_where_the_pod_fits():
    """kube-scheduler 1.38 may send a node with an empty victim list (its in-tree filters found the
    pod fits there without preemption): kept when the pod fits railyard's view of the node, dropped
    when it does not (GPUs reserved or used that the scheduler does not see)."""
    ext, _, _ = extender("rack r1: a b\n")
    busy = pod("busy", 8, node="b")
    busy["status"]["phase"] = "Running"
    ext.pod_upserted(busy)
    assert ext.preempt(pod("hi", 8), {"a": [], "b": []}) == {"a": []}
    assert ext.preempt(pod("hi", 8), {"b": []}) == {}
