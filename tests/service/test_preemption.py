"""Gang-aware preemption through the live service (issue 12), with an in-memory Binder that
records every eviction: the preempt verb for a gang member evicts (through the binder) only
inside the chosen domain and tells kube-scheduler to evict nothing; the domain stays reserved
while the victims terminate; the gang then binds whole there."""

from __future__ import annotations

import threading

from extender.adapters.k8s.errors import Unavailable
from extender.core.errors import GangUnreserved
from extender.core.gangs.lifecycle import Phase
from extender.settings import PreemptionSettings, Settings
from tests.service.test_live import Clock, Extender, MemoryBinder, wait_until
from tests.topologies import FOUR_NVL, gang, pod
from tests.topologies import FOUR_NVL_NODES as NODES

REQUIRED = {"railyard.io/min-member": "4", "railyard.io/required-topology": "nvlink"}


class EvictingBinder(MemoryBinder):
    """Records dry runs and evictions; ``refuse`` maps pod keys to the API server's refusal."""

    def __init__(self, refuse: dict[str, str] | None = None, fail: dict[str, int] | None = None):
        super().__init__()
        self.asked: list[str] = []
        self.evicted: list[str] = []
        self.refuse = dict(refuse or {})
        self.fail = dict(fail or {})
        """pod key -> how many more real eviction calls for it fail (no answer) before one passes."""

    def evict(self, pod, dry_run=False):
        key = pod.key
        with self.lock:
            if not dry_run and self.fail.get(key, 0) > 0:
                self.fail[key] -= 1
                raise Unavailable(f"POST /api/v1/namespaces/lo/pods/{pod.name}/eviction: timed out")
            (self.asked if dry_run else self.evicted).append(key)
        return self.refuse.get(key)


def service(running, settings=Settings(), refuse=None, fail=None):
    binder, clock = EvictingBinder(refuse, fail), Clock()
    ext = Extender(settings, binder, clock=clock)
    ext.preemption.run = lambda job: job()  # the Eviction API calls, inline
    ext.preemption.sleep = lambda seconds: None
    from extender import topotext
    ext.relisted("nodes", topotext.load(FOUR_NVL).nodes)
    ext.relisted("pods", running)
    ext.relisted("podgroups", [])
    return ext, binder, clock


def low(node: str, priority: int = 100, name: str | None = None) -> dict:
    return pod(name or f"p-{node}", 8, ns="lo", node=node, priority=priority)


def high(count: int = 4, priority: int = 1000, name: str = "llama", annotations=REQUIRED) -> list[dict]:
    members = gang(name, count, 8, annotations=annotations, priority=priority)
    return members


def evicted_nodes(binder) -> set[str]:
    return {key.split("-", 1)[1] for key in binder.evicted}


def events(binder, reason: str) -> list[str]:
    return [m for r, m in binder.events if r == reason]


def test_a_full_cluster_clears_one_nvlink_domain_and_the_gang_binds_whole_there():
    running = [low(n) for n in NODES]
    ext, binder, _ = service(running)
    members = high()
    for p in members:
        ext.pod_upserted(p)
    # kube-scheduler offers per-pod victims anywhere; railyard answers: evict nothing yourself.
    assert ext.preempt(members[0], {"d4": ["uid-lo-p-d4"], "c1": ["uid-lo-p-c1"]}) == {}
    assert binder.asked == binder.evicted == ["lo/p-a1", "lo/p-a2", "lo/p-a3", "lo/p-a4"]
    reason = ("evicting 4 pods of priority 100 in nvlink b1/r1/n1 to place gang ml/llama (priority 1000): "
              "32 GPUs needed, 0 free")
    assert events(binder, "Preempting") == [reason] * 4
    assert events(binder, "Preempted") == [
        f"pod lo/p-a{i} (priority 100) evicted by railyard to place gang ml/llama (priority 1000) in nvlink b1/r1/n1"
        for i in range(1, 5)]
    (g,) = ext.debug_gangs()
    assert (g.phase, g.reason) == ("planned", reason)
    # The other members' preempt calls start nothing new.
    assert ext.preempt(members[1], {"d4": ["uid-lo-p-d4"]}) == {}
    assert len(binder.evicted) == 4
    # Two victims are gone; a member planned on a node still held waits, it is not replanned.
    for n in ("a1", "a2"):
        ext.pod_deleted(low(n))
    slots = {p["metadata"]["name"]: ext.ctx.state.slot_of(f"ml/{p['metadata']['name']}").node for p in members}
    waiting = next(p for p in members if slots[p["metadata"]["name"]] == "a3")
    v = ext.filter(waiting, ["a1", "a2"])
    assert v.node_names == ()
    assert v.failed["a1"] == (f"gang ml/llama reserved node a3 for ml/{waiting['metadata']['name']}; waiting for "
                              f"1 pod evicted there to terminate")
    assert ext.debug_gangs()[0].phase == "planned"
    # A victim railyard saw go that kube-scheduler still counts (two watches): no refusal either.
    first = next(p for p in members if slots[p["metadata"]["name"]] == "a1")
    v = ext.filter(first, ["a2"])
    assert v.node_names == () and v.failed["a2"] == (
        f"gang ml/llama reserved node a1 for ml/{first['metadata']['name']}; the pods evicted there are gone, "
        f"waiting for kube-scheduler to see it")
    assert ext.debug_gangs()[0].phase == "planned"
    for n in ("a3", "a4"):
        ext.pod_deleted(low(n))
    errors, threads = {}, []
    for p in members:
        v = ext.filter(p, ["a1", "a2", "a3", "a4"])
        assert v.node_names == (slots[p["metadata"]["name"]],)

        def bind(p=p):
            try:
                ext.bind("ml", p["metadata"]["name"], p["metadata"]["uid"], slots[p["metadata"]["name"]])
            except Exception as exc:
                errors[p["metadata"]["name"]] = exc
        threads.append(threading.Thread(target=bind))
        threads[-1].start()
    for t in threads:
        t.join(5)
    assert errors == {}
    assert sorted(n for _, n in binder.bound) == ["a1", "a2", "a3", "a4"]


def test_a_refused_eviction_moves_the_choice_to_the_next_domain():
    running = [low(n) for n in NODES]
    refusal = "429 Cannot evict pod as it would violate the pod's disruption budget."
    ext, binder, _ = service(running, refuse={"lo/p-a2": refusal})
    members = high()
    for p in members:
        ext.pod_upserted(p)
    assert ext.preempt(members[0], {"a1": ["uid-lo-p-a1"]}) == {}
    assert binder.asked == [f"lo/p-a{i}" for i in range(1, 5)] + [f"lo/p-b{i}" for i in range(1, 5)]
    assert binder.evicted == [f"lo/p-b{i}" for i in range(1, 5)]  # nothing evicted in n1: no waste
    assert events(binder, "PreemptionBlocked")[0] == (
        f"gang ml/llama: evicting lo/p-a2 was refused ({refusal}); choosing again without it for 30s")
    assert ext.debug_gangs()[0].reason.startswith("evicting 4 pods of priority 100 in nvlink b1/r1/n2")


def test_an_eviction_call_that_fails_is_made_again_and_the_gang_stays_in_its_domain():
    # Under load an eviction call can time out (and may have evicted the pod all the same):
    # taken for a refusal, it would send the gang to the next domain and evict 4 more there.
    running = [low(n) for n in NODES]
    ext, binder, _ = service(running, fail={"lo/p-a2": 2})
    members = high()
    for p in members:
        ext.pod_upserted(p)
    assert ext.preempt(members[0], {"a1": ["uid-lo-p-a1"]}) == {}
    assert sorted(binder.evicted) == [f"lo/p-a{i}" for i in range(1, 5)]
    assert events(binder, "PreemptionBlocked") == []
    assert ext.debug_gangs()[0].reason.startswith("evicting 4 pods of priority 100 in nvlink b1/r1/n1")


def test_an_eviction_call_that_fails_every_time_counts_as_refused():
    running = [low(n) for n in NODES]
    ext, binder, _ = service(running, fail={"lo/p-a2": 3})
    members = high()
    for p in members:
        ext.pod_upserted(p)
    assert ext.preempt(members[0], {"a1": ["uid-lo-p-a1"]}) == {}
    blocked = events(binder, "PreemptionBlocked")[0]  # one per member
    assert blocked == ("gang ml/llama: evicting lo/p-a2 was refused (POST /api/v1/namespaces/lo/pods/p-a2/eviction: "
                       "timed out (tried 3 times)); choosing again without it for 30s")
    assert ext.debug_gangs()[0].reason.startswith("evicting 4 pods of priority 100 in nvlink b1/r1/n2")


def test_equal_priority_never_preempts():
    ext, binder, _ = service([low(n, priority=1000) for n in NODES])
    members = high()
    for p in members:
        ext.pod_upserted(p)
    assert ext.preempt(members[0], {"a1": ["uid-lo-p-a1"]}) == {}
    assert binder.asked == binder.evicted == []
    assert events(binder, "CannotPreempt")[0] == (
        "gang ml/llama (priority 1000) cannot preempt: best nvlink b1/r1/n1 fits 0 of 4 pods even with every pod "
        "it may evict gone (32 GPUs held by pods of priority 1000 or more)")
    assert ext.debug_gangs()[0].phase == "pending"


def test_a_gang_that_can_never_fit_its_nvlink_domain_gets_no_victims():
    # The service-level reproduction: victims were approved on two nodes for it.
    ext, binder, _ = service([low(n) for n in NODES])
    members = high(6, annotations={"railyard.io/min-member": "6", "railyard.io/required-topology": "nvlink"})
    for p in members:
        ext.pod_upserted(p)
    assert ext.preempt(members[0], {"a1": ["uid-lo-p-a1"], "b1": ["uid-lo-p-b1"]}) == {}
    assert binder.asked == binder.evicted == []
    assert events(binder, "CannotPreempt")[0].endswith("best nvlink b1/r1/n1 fits 4 of 6 pods even with every pod "
                                                       "it may evict gone (0 GPUs held by pods of priority 1000 or more)")


def test_a_lower_priority_reservation_waiting_at_bind_is_released_first():
    # n3 is free but reserved by a lower-priority gang, one of whose members waits at bind.
    running = [low(n) for n in NODES if not n.startswith("c")]
    ext, binder, _ = service(running)
    small = gang("small", 4, 8, ns="ml", priority=100, annotations=REQUIRED)
    for p in small:
        ext.pod_upserted(p)
    plan = {p["metadata"]["name"]: ext.filter(p, NODES).node_names[0] for p in small}
    assert set(plan.values()) == {"c1", "c2", "c3", "c4"}
    errors = {}

    def bind():
        try:
            ext.bind("ml", "small-0", "uid-ml-small-0", plan["small-0"])
        except Exception as exc:
            errors["small-0"] = exc
    t = threading.Thread(target=bind)
    t.start()
    wait_until(lambda: any(g.phase.startswith("waiting") for g in ext.debug_gangs()))
    members = high()
    for p in members:
        ext.pod_upserted(p)
    assert ext.preempt(members[0], {"a1": ["uid-lo-p-a1"]}) == {}
    t.join(5)
    assert binder.evicted == []  # no pod evicted: the reservation was enough
    reason = ("reservation of gang ml/small (priority 100) released to place gang ml/llama (priority 1000) in "
              "nvlink b1/r2/n3; planning again")
    assert isinstance(errors["small-0"], GangUnreserved) and str(errors["small-0"]) == reason
    assert events(binder, "ReservationPreempted") == [reason] * 4
    gangs = {g.gang: g for g in ext.debug_gangs()}
    assert gangs["ml/small"].phase == "pending"
    assert gangs["ml/llama"].reason == ("releasing the reservation of gang ml/small (priority 100) in nvlink "
                                           "b1/r2/n3 to place gang ml/llama (priority 1000): 32 GPUs needed, 0 free")
    assert {ext.ctx.state.slot_of(f"ml/llama-{i}").node for i in range(4)} == {"c1", "c2", "c3", "c4"}


def test_gangs_preemption_off_leaves_gang_members_without_preemption():
    settings = Settings(preemption=PreemptionSettings(gangs=False))
    ext, binder, _ = service([low(n) for n in NODES], settings=settings)
    members = high()
    for p in members:
        ext.pod_upserted(p)
    assert ext.preempt(members[0], {"a1": ["uid-lo-p-a1"]}) == {}
    assert binder.asked == binder.evicted == [] and binder.events == []


def test_single_pods_keep_kube_schedulers_preemption():
    ext, binder, _ = service([low(n) for n in NODES])
    victims = {"a1": ["uid-lo-p-a1"]}
    assert ext.preempt(pod("solo", 8, priority=1000), victims) == victims
    assert binder.asked == binder.evicted == []


def test_victims_that_never_leave_time_the_reservation_out():
    ext, binder, clock = service([low(n) for n in NODES])
    members = high()
    for p in members:
        ext.pod_upserted(p)
    ext.preempt(members[0], {"a1": ["uid-lo-p-a1"]})
    deadline = ext.ctx.book.get("ml/llama").deadline
    assert deadline == clock.now + 60 + 60  # the gang's timeout plus preemption.victim_wait_seconds
    clock.now = deadline + 1
    ext.explain("ml/llama-0")  # any verb applies time
    assert ext.debug_gangs()[0].phase == "timed out"
    assert ext.ctx.state.reservations() == {}


def test_members_the_watch_had_not_shown_yet_wait_for_their_slots_too():
    # The first member's preempt call came before the watch showed the others: their slots are
    # reserved unnamed; a later member filtered while its slot's node still holds a victim waits.
    ext, binder, _ = service([low(n) for n in NODES])
    members = high()
    ext.pod_upserted(members[0])
    assert ext.preempt(members[0], {"a1": ["uid-lo-p-a1"]}) == {}
    assert binder.evicted == [f"lo/p-a{i}" for i in range(1, 5)]
    for p in members[1:]:
        ext.pod_upserted(p)
    first = ext.ctx.state.slot_of("ml/llama-0").node
    ext.pod_deleted(low(first))
    v = ext.filter(members[1], [first])
    assert v.node_names == () and "waiting for 1 pod evicted there to terminate" in next(iter(v.failed.values()))
    assert ext.debug_gangs()[0].phase == "planned"
    for n in ("a1", "a2", "a3", "a4"):
        ext.pod_deleted(low(n))
    nodes = {ext.filter(p, ["a1", "a2", "a3", "a4"]).node_names for p in members}
    assert sorted(n for (n,) in nodes) == ["a1", "a2", "a3", "a4"]
    assert len(binder.evicted) == 4


def test_a_later_member_waits_for_the_seat_its_rank_will_claim():
    # Ranked members the watch had not shown keep the seats the plan made for their ranks. Each
    # waits for the victims on its own seat's node, not on the first free placeholder's: the
    # victims of the first seats gone, the last member filtered waits, the gang keeps its plan
    # (CI, 2026-12-07: the gang was planned again without the last seat's node, and starved).
    ext, binder, _ = service([low(n) for n in NODES])
    ranked = [{"scheduling.x-k8s.io/pod-group": "llama", "batch.kubernetes.io/job-completion-index": str(i)}
              for i in range(4)]
    members = [pod(f"llama-{i}", 8, ns="ml", priority=1000, annotations=REQUIRED, labels=ranked[i]) for i in range(4)]
    ext.pod_upserted(members[0])
    assert ext.preempt(members[0], {"a1": ["uid-lo-p-a1"]}) == {}
    assert binder.evicted == [f"lo/p-a{i}" for i in range(1, 5)]
    for p in members[1:]:
        ext.pod_upserted(p)
    seats = {s.member: s.node for s in ext.ctx.state.reservation("ml/llama").slots}
    assert len(set(seats.values())) == 4 and seats.pop("ml/llama-0")
    last = seats["ml/llama#3"]
    freed = sorted(set(seats.values()) - {last})
    for n in freed:
        ext.pod_deleted(low(n))
    v = ext.filter(members[3], freed)
    assert v.node_names == () and "waiting for 1 pod evicted there to terminate" in next(iter(v.failed.values()))
    assert ext.debug_gangs()[0].phase == "planned"
    ext.pod_deleted(low(last))
    assert ext.filter(members[3], [*freed, last]).node_names == (last,)


def test_a_gang_that_found_nothing_looks_again_only_after_a_moment():
    ext, binder, clock = service([low(n, priority=1000) for n in NODES])
    members = high()
    for p in members:
        ext.pod_upserted(p)
    ext.preempt(members[0], {"a1": ["uid-lo-p-a1"]})
    for n in ("b1", "b2", "b3", "b4"):  # n2 now holds pods it may take
        ext.pod_deleted(low(n, priority=1000))
        ext.pod_upserted(low(n, name=f"q-{n}"))
    ext.preempt(members[1], {"a1": ["uid-lo-p-a1"]})
    assert binder.evicted == []  # every member's attempt asks: not every one recomputes
    clock.now += 2.0
    ext.preempt(members[1], {"a1": ["uid-lo-p-a1"]})
    assert binder.evicted == [f"lo/q-b{i}" for i in range(1, 5)]


def test_the_wait_for_victims_stays_below_kube_schedulers_cut_of_held_binds():
    from extender.settings import GangSettings
    settings = Settings(gangs=GangSettings(max_timeout_seconds=90.0))
    ext, _, clock = service([low(n) for n in NODES], settings=settings)
    members = high()
    for p in members:
        ext.pod_upserted(p)
    ext.preempt(members[0], {"a1": ["uid-lo-p-a1"]})
    assert ext.ctx.book.get("ml/llama").deadline == clock.now + 90  # not 60 + 60


def test_a_lower_priority_gang_whose_bindings_are_going_out_is_not_taken():
    running = [low(n) for n in NODES if not n.startswith("c")]
    ext, binder, _ = service(running)
    small = gang("small", 4, 8, ns="ml", priority=100, annotations=REQUIRED)
    for p in small:
        ext.pod_upserted(p)
    for p in small:
        ext.filter(p, NODES)
    ext.ctx.book.get("ml/small").phase = Phase.BINDING  # its last member reached permit: Bindings go out
    members = high()
    for p in members:
        ext.pod_upserted(p)
    assert ext.preempt(members[0], {"a1": ["uid-lo-p-a1"]}) == {}
    assert ext.ctx.book.get("ml/small").phase == Phase.BINDING
    assert binder.evicted == [f"lo/p-a{i}" for i in range(1, 5)]  # pods elsewhere, not its slots


def test_a_workload_api_member_preempts_from_filter_kube_scheduler_never_calls_preempt_for_it():
    # spec.schedulingGroup: kube-scheduler schedules the pod in a pod-group cycle, which calls
    # no extender's preempt verb; railyard chooses and evicts when the member is filtered.
    ext, binder, _ = service([low(n) for n in NODES])
    members = high()
    for p in members:
        p["spec"]["schedulingGroup"] = {"podGroupName": "llama"}
        ext.pod_upserted(p)
    v = ext.filter(members[0], NODES)
    assert v.node_names == ()
    assert binder.asked == binder.evicted == ["lo/p-a1", "lo/p-a2", "lo/p-a3", "lo/p-a4"]
    assert events(binder, "Preempting") == [
        "evicting 4 pods of priority 100 in nvlink b1/r1/n1 to place gang ml/llama (priority 1000): "
        "32 GPUs needed, 0 free"] * 4
    ext.filter(members[1], NODES)  # the next member starts nothing new
    assert len(binder.evicted) == 4


def test_a_plain_member_filtered_on_a_full_cluster_waits_for_the_preempt_verb():
    ext, binder, _ = service([low(n) for n in NODES])
    members = high()
    for p in members:
        ext.pod_upserted(p)
    assert ext.filter(members[0], NODES).node_names == ()
    assert binder.asked == binder.evicted == []
    assert ext.debug_gangs()[0].phase == "pending"


def test_a_workload_api_member_of_equal_priority_filtered_evicts_nothing():
    ext, binder, _ = service([low(n, priority=1000) for n in NODES])
    members = high()
    for p in members:
        p["spec"]["schedulingGroup"] = {"podGroupName": "llama"}
        ext.pod_upserted(p)
    assert ext.filter(members[0], NODES).node_names == ()
    assert binder.asked == binder.evicted == []
    assert events(binder, "CannotPreempt")[0].startswith("gang ml/llama (priority 1000) cannot preempt")
