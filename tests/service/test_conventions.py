"""Gangs of each convention through the live service: sized by their own group object, never
bound before the last member exists; gangs of undeclared size wait to settle; kube-scheduler's
pod-group cycle (one filter call per pod per candidate placement) is answered from one plan."""

from __future__ import annotations

import pytest

from extender import topotext
from extender.adapters.k8s.watch_cache import KINDS
from extender.adapters.kubeobjects.groups import KAI, KUBERNETES, VOLCANO
from extender.core.placement import planner as planner_module
from extender.core.errors import NotReady, Settling
from extender.settings import GangSettings, Settings
from tests.service.test_live import NODES, Clock, Extender, MemoryBinder, bind_async, create, wait_until
from tests.topologies import TWO_RACKS, pod

GROUP_KINDS = [k for k in KINDS if k not in ("nodes", "pods")]
LEAF = "network.topology.nvidia.com/leaf"


def extender(drawing=TWO_RACKS, settle=5.0, groups=()):
    """The service as app.py builds it (waiting for every kind), with ``groups`` as (kind, object)."""
    binder, clock = MemoryBinder(), Clock()
    ext = Extender(Settings(gangs=GangSettings(settle_seconds=settle)), binder, clock=clock, kinds=KINDS)
    spec = topotext.load(drawing)
    ext.relisted("nodes", spec.nodes)
    ext.relisted("pods", spec.filler_pods())
    for kind in GROUP_KINDS:
        ext.relisted(kind, [obj for k, obj in groups if k == kind])
    return ext, binder, clock


def member(convention: str, i: int, gpus: int = 8, group: str = "g") -> dict:
    names = {VOLCANO: {"annotations": {"scheduling.k8s.io/group-name": group}},
             KAI: {"annotations": {"pod-group-name": group}},
             KUBERNETES: {"schedulingGroup": {"podGroupName": group}}}
    return pod(f"{group}-{i}", gpus, **names[convention])


def podgroup(convention: str, size: int, name: str = "g", required: str | None = None) -> tuple[str, dict]:
    if convention == KUBERNETES:
        spec = {"schedulingPolicy": {"gang": {"minCount": size}}}
        if required:
            spec["schedulingConstraints"] = {"topology": [{"key": required}]}
        version = "scheduling.k8s.io/v1beta1"
    else:
        spec = {"minMember": size}
        if required and convention == KAI:
            spec["topologyConstraint"] = {"requiredTopologyLevel": required}
        if required and convention == VOLCANO:
            spec["networkTopology"] = {"mode": "hard", "highestTierName": required}
        version = {VOLCANO: "scheduling.volcano.sh/v1beta1", KAI: "scheduling.run.ai/v2alpha2"}[convention]
    # A list item as the API server sends it for the watched kind.
    return convention, {"apiVersion": version, "kind": "PodGroup", "metadata": {"name": name, "namespace": "ml"},
                        "spec": spec}


def key(p: dict) -> str:
    return f"ml/{p['metadata']['name']}"


# -- gangs sized by their own convention's group -----------------------------------------------

@pytest.mark.parametrize("convention", [VOLCANO, KAI, KUBERNETES])
def test_members_created_one_by_one_are_held_until_the_last_exists_then_bound_whole(convention):
    ext, binder, clock = extender(groups=[podgroup(convention, 3)])
    pods = [member(convention, i) for i in range(3)]
    errors, threads, plan = {}, [], {}
    for i, p in enumerate(pods):
        create(ext, [p])
        v = ext.filter(p, NODES)
        assert len(v.node_names) == 1, v
        plan[key(p)] = v.node_names[0]
        if i == 0:
            # Planned at the first member with slots for all three: the size is the PodGroup's.
            assert len(ext.ctx.state.reservation("ml/g").slots) == 3
        if i < 2:
            threads.append(bind_async(ext, p, plan[key(p)], errors))
            wait_until(lambda: ext.debug_gangs()[0].phase == f"waiting at bind {i + 1}/3")
            assert binder.bound == []
            clock.now += 2.0  # the controller takes its time; still well inside the 60 s timeout
    ext.bind("ml", "g-2", "uid-ml-g-2", plan["ml/g-2"])
    for t in threads:
        t.join(5)
    assert errors == {}
    # An oracle apart from the planner: TWO_RACKS' rack r1 is the one with three free 8-GPU nodes.
    assert sorted(binder.bound) == sorted(plan.items()) and set(plan.values()) == {"h1", "h2", "h3"}


def test_a_podgroups_required_level_bounds_the_gang():
    for convention in (VOLCANO, KAI, KUBERNETES):
        ext, _, _ = extender(groups=[podgroup(convention, 4, required="nvlink")])
        p = member(convention, 0)
        create(ext, [p])
        v = ext.filter(p, NODES)
        assert v.node_names == ()
        assert v.failed["h1"] == ("gang ml/g needs 4 pods x 8 GPUs within one network.topology.nvidia.com/accelerator; "
                                  "best nvlink b1/r1/n1 fits 2"), convention


def test_two_conventions_groups_with_one_name_stay_apart_and_a_relist_replaces_only_its_kind():
    ext, _, _ = extender(groups=[podgroup(VOLCANO, 3), podgroup(KAI, 2)])
    assert {i: g.key for i, g in ext.ctx.groups.items()} == {(VOLCANO, "ml/g"): "ml/g", (KAI, "ml/g"): "ml/g"}
    ext.relisted(VOLCANO, [])
    assert set(ext.ctx.groups) == {(KAI, "ml/g")}
    p = member(KAI, 0)
    create(ext, [p])
    ext.filter(p, NODES)
    assert len(ext.ctx.state.reservation("ml/g").slots) == 2
    ext.group_deleted(ext.ctx.groups[(KAI, "ml/g")])
    assert ext.ctx.groups == {}


def test_not_ready_until_every_kind_of_group_is_listed():
    ext = Extender(Settings(), MemoryBinder(), kinds=KINDS)
    spec = topotext.load(TWO_RACKS)
    ext.relisted("nodes", spec.nodes)
    ext.relisted("pods", [])
    for kind in GROUP_KINDS[:-1]:
        ext.relisted(kind, [])
    p = member(KAI, 0)
    with pytest.raises(NotReady, match=rf"still listing {GROUP_KINDS[-1]} after a start; gang ml/g"):
        ext.filter(p, NODES)
    ext.relisted(GROUP_KINDS[-1], [])
    assert ext.ready()


# -- gangs whose size is declared nowhere -------------------------------------------------------

def settling(members: int, ago: float) -> str:
    return (f"gang ml/g declares no size: {members} member{'s' if members != 1 else ''} seen, the newest {ago:.1f}s "
            f"ago; it is planned once no new member appears for 5s (declare the size to skip the wait: "
            f"railyard.io/min-member or its PodGroup's)")


def test_a_gang_of_undeclared_size_waits_holding_nothing_until_no_member_is_new_for_the_settle_time():
    ext, binder, clock = extender(settle=5.0)  # no PodGroup: Volcano pods whose size nobody declares
    pods = [member(VOLCANO, i) for i in range(3)]
    for i, p in enumerate(pods):
        create(ext, [p])
        clock.now += 0.5
        with pytest.raises(Settling) as no:
            ext.filter(pods[0], NODES)
        assert str(no.value) == settling(i + 1, 0.5)
        assert ext.ctx.state.reservations() == {}
        clock.now += 2.5  # the next member comes 3 s after this one: inside the settle time
    # 3.0 s since the newest member: explain says so with the numbers of now.
    got = ext.explain("ml/g-1")
    assert (got.phase, got.reason) == ("pending", settling(3, 3.0))
    assert ext.debug_gangs()[0].reason == settling(3, 0.5)  # as the last filter answered
    clock.now += 1.9
    with pytest.raises(Settling, match="the newest 4.9s ago"):
        ext.filter(pods[2], NODES)
    clock.now += 0.1
    plan = {key(p): ext.filter(p, NODES).node_names for p in pods}
    assert set(plan.values()) == {("h1",), ("h2",), ("h3",)}  # whole, in rack r1
    assert len(ext.ctx.state.reservation("ml/g").slots) == 3
    errors = {}
    threads = [bind_async(ext, p, plan[key(p)][0], errors) for p in pods[:2]]
    wait_until(lambda: ext.debug_gangs()[0].phase == "waiting at bind 2/3")
    assert binder.bound == []
    ext.bind("ml", "g-2", "uid-ml-g-2", plan["ml/g-2"][0])
    for t in threads:
        t.join(5)
    assert errors == {} and len(binder.bound) == 3


def test_a_member_seen_again_is_not_new_and_settle_zero_plans_at_once():
    ext, _, clock = extender(settle=5.0)
    p = member(KAI, 0)
    create(ext, [p])
    clock.now += 4.0
    ext.pod_upserted(p)  # an update (a label changed), not a new member
    ext.relisted("pods", [*topotext.load(TWO_RACKS).filler_pods(), p])  # nor after a relist
    clock.now += 1.0
    assert len(ext.filter(p, NODES).node_names) == 1
    ext, _, _ = extender(settle=0.0)
    create(ext, [p])
    assert len(ext.filter(p, NODES).node_names) == 1
    assert len(ext.ctx.arrivals) == 1
    ext.pod_deleted(p)
    assert len(ext.ctx.arrivals) == 0  # nothing left waiting: forgotten


# -- kube-scheduler's pod-group cycle: one filter call per pod per candidate placement ----------

RACKS = """
block b1
  rack r1
    nvl n1: a1 a2 a3
  rack r2
    nvl n2: c1 c2 c3
  rack r3
    nvl n3: d1 d2 d3
  rack r4
    nvl n4: e1 e2 e3
"""
PLACEMENTS = {"r1": ["a1", "a2", "a3"], "r2": ["c1", "c2", "c3"], "r3": ["d1", "d2", "d3"], "r4": ["e1", "e2", "e3"]}


def test_candidate_placements_are_answered_from_one_plan_and_never_count_as_refusals(monkeypatch):
    plans = []
    real_plan = planner_module.plan  # the book plans through homes.plan_near -> planner.plan
    monkeypatch.setattr(planner_module, "plan", lambda spec, *rest: plans.append(spec.key) or real_plan(spec, *rest))
    ext, binder, _ = extender(RACKS, groups=[podgroup(KUBERNETES, 2, required=LEAF)])
    pods = [member(KUBERNETES, i) for i in range(2)]
    create(ext, pods)
    answers = []
    for cycle in range(3):  # the scheduler retries the group three times without binding it
        passed = {}
        for rack, nodes in PLACEMENTS.items():  # TopologyPlacementGenerator: one placement per rack value
            for p in pods:
                v = ext.filter(p, nodes)
                if not v.node_names:
                    break  # PlacementFeasible: minCount 2 can no longer be met here
                passed.setdefault(rack, {})[key(p)] = v.node_names
        answers.append(passed)
    assert plans == ["ml/g"]  # 3 cycles x 4 placements, one plan
    assert answers[0] == answers[1] == answers[2] and len(answers[0]) == 1
    (rack, steered), = answers[0].items()
    assert sorted(n for (n,) in steered.values()) == PLACEMENTS[rack][:2]
    rec = ext.ctx.book.get("ml/g")
    assert (rec.phase.value, rec.refused) == ("planned", {})  # no placement counted as a refusal
    # Every node of a losing placement says where the gang is planned.
    other = next(r for r in PLACEMENTS if r != rack)
    v = ext.filter(pods[0], PLACEMENTS[other])
    nvl = f"n{rack[1:]}"  # the NVLink domain inside the rack: the narrowest that holds the gang
    assert set(v.failed.values()) == {f"gang ml/g reserved node {steered['ml/g-0'][0]} for ml/g-0 (planned within "
                                      f"network.topology.nvidia.com/accelerator b1/{rack}/{nvl})"}
    # Inside the planned rack, the planned node left out is kube-scheduler refusing it: the gang
    # is planned again at once without it.
    first = steered["ml/g-0"][0]
    v = ext.filter(pods[0], [n for n in PLACEMENTS[rack] if n != first])
    assert rec.refused == {first: "ml/g-0"} and len(plans) == 2
    again = {key(p): ext.filter(p, PLACEMENTS[rack]).node_names for p in pods}
    assert sorted(n for (n,) in again.values()) == [n for n in PLACEMENTS[rack] if n != first]
    errors = {}
    t = bind_async(ext, pods[0], again["ml/g-0"][0], errors)
    wait_until(lambda: ext.debug_gangs()[0].phase == "waiting at bind 1/2")
    ext.bind("ml", "g-1", "uid-ml-g-1", again["ml/g-1"][0])
    t.join(5)
    assert errors == {} and sorted(binder.bound) == sorted((k, n) for k, (n,) in again.items())
    assert len(plans) == 2
