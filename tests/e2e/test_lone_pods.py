"""Lone pods never pay for railyard; gang members wait gated and are released whole, nominated
to their planned nodes (issue 21 items 2-4). Real kube-apiserver (the MutatingAdmissionPolicy),
kube-scheduler 1.37.2 (managedResources, the nominator, scheduling gates), kwok and the real
extender process.

One cluster for the module, 8 kwok nodes x 8 GPUs::

    block b1
      rack r1: nvl n1 (2 nodes)  nvl n2 (2 nodes)
      rack r2: nvl n1 (2 nodes)  nvl n2 (2 nodes)
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from extender.adapters.kubeobjects import GATE, MARKER, MEMBERSHIP
from extender.localcluster import processes

from .helpers import (
    BindingWatch, create_pods, delete_pods, gang_pods, gpu_pod, metric, names_of, namespace, pods_by_name, unique,
    wait_for, wait_for_phase, wait_released, wait_unschedulable,
)

pytestmark = pytest.mark.e2e

TOPOLOGY = "blocks=1 racks=2 nvl=2 nodes=2 gpus=8 scheme=topograph"
NODES = 8
HOLD = "example.com/hold"
"""Another component's scheduling gate (Kueue adds its own): railyard lifts only its own, and plans
a gang only once no other is left."""


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(topology=TOPOLOGY, extender=True)


@pytest.fixture
def ns(cluster):
    name = namespace(cluster.core)
    yield name
    delete_pods(cluster.core, name)
    wait_released(cluster, name)


def state(cluster) -> dict:
    return json.loads((cluster.workdir / "cluster.json").read_text())


def filters(cluster) -> float:
    """railyard's filter calls so far."""
    return metric(state(cluster)["extender"].rsplit("/scheduler", 1)[0], "railyard_verb_duration_seconds_count",
                  verb="filter")


def attempts(cluster, result: str) -> float:
    return metric(state(cluster)["replicas"][0]["schedulerUrl"], "scheduler_schedule_attempts_total", result=result)


def named(where: str, key: str, value: str, pod: dict) -> dict:
    """``pod`` naming its gang ``value`` the way one MEMBERSHIP row reads it."""
    if where == "label":
        pod["metadata"]["labels"][key] = value
    elif where == "annotation":
        pod["metadata"]["annotations"][key] = value
    else:
        assert key == "spec.schedulingGroup.podGroupName"
        pod["spec"]["schedulingGroup"] = {"podGroupName": value}
    return pod


def admitted(cluster, ns: str, pod: dict) -> dict:
    """The pod as kube-apiserver would store it (a dry run: the admission chain runs)."""
    core = cluster.core
    return core.api_client.sanitize_for_serialization(core.create_namespaced_pod(ns, pod, dry_run="All"))


def is_marked(pod: dict) -> tuple[bool, bool]:
    """(gated by railyard, the marker requested and limited on the first container)."""
    gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
    res = pod["spec"]["containers"][0].get("resources") or {}
    marker = res.get("requests", {}).get(MARKER) == "1" and res.get("limits", {}).get(MARKER) == "1"
    return GATE in gates, marker


@pytest.mark.parametrize("row", MEMBERSHIP, ids=lambda r: f"{r[0]}:{r[1]}")
def test_every_membership_convention_is_marked_gated_and_released(cluster, ns, row):
    where, key, _ = row
    pod = named(where, key, "g", gpu_pod(unique("m"), 8, annotations={"railyard.io/min-member": "1"}))
    assert is_marked(admitted(cluster, ns, pod)) == (True, True)
    # Created for real, railyard lifts the gate: a gang of one binds, and a pod whose field the
    # API server dropped after admission (spec.schedulingGroup: GenericWorkload is off by
    # default in 1.37.2) names no gang and is released at once.
    (name,) = create_pods(cluster.core, ns, [pod])
    wait_for_phase(cluster.core, ns, [name], "Running", timeout=60)


def test_lone_pods_cpu_members_other_schedulers_and_bound_pods_are_left_alone(cluster, ns):
    key = "scheduling.x-k8s.io/pod-group"
    lone = gpu_pod(unique("lone"), 8)
    cpu_member = named("label", key, "g", gpu_pod(unique("cpu"), 0))
    cpu_member["spec"]["containers"][0]["resources"] = {}
    elsewhere = named("label", key, "g", gpu_pod(unique("other"), 8, scheduler_name="my-scheduler"))
    bound = named("label", key, "g", gpu_pod(unique("bound"), 8))
    bound["spec"]["nodeName"] = "b1-r1-n1-h1"
    for pod in (lone, cpu_member, elsewhere, bound):
        assert is_marked(admitted(cluster, ns, pod)) == (False, False), pod["metadata"]["name"]
    # A member whose GPUs are in an init container is a member too.
    init = named("label", key, "g", gpu_pod(unique("init"), 0))
    init["spec"]["containers"][0]["resources"] = {}
    init["spec"]["initContainers"] = [{"name": "i", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    assert is_marked(admitted(cluster, ns, init)) == (True, True)


def test_lone_pods_never_reach_the_extender_and_gang_members_do(cluster, ns):
    before = filters(cluster)
    lone = create_pods(cluster.core, ns, [gpu_pod(unique("lone"), 4) for _ in range(NODES)])
    wait_for_phase(cluster.core, ns, lone, "Running", timeout=60)
    assert filters(cluster) == before  # 8 GPU pods bound by kube-scheduler alone
    gang = gang_pods(unique("g"), 2, gpus=4)
    with BindingWatch(cluster.core, ns) as watch:
        create_pods(cluster.core, ns, gang)
        watch.wait_bound(names_of(gang), 60, "the gang")
        watch.assert_whole()
    assert filters(cluster) >= before + 2


def test_a_gang_waits_gated_without_scheduling_attempts_then_binds_whole(cluster, ns):
    core = cluster.core
    # Fill every GPU with lone pods that finish in 8 s.
    fill = create_pods(core, ns, [gpu_pod(unique("fill"), 8, sim_runtime="8s") for _ in range(NODES)])
    wait_for_phase(core, ns, fill, "Running", timeout=60)
    unschedulable = attempts(cluster, "unschedulable")
    scheduled = attempts(cluster, "scheduled")
    gang = gang_pods(unique("g"), 4, gpus=8)
    with BindingWatch(core, ns) as watch:
        create_pods(core, ns, gang)
        pods = pods_by_name(core, ns)
        assert all(GATE in [g.name for g in pods[n].spec.scheduling_gates or []] for n in names_of(gang))
        placed = watch.wait_bound(names_of(gang), 90, "the gang, once the fill finished")
        watch.assert_whole()
    # While it waited (GPUs full), kube-scheduler never tried a member: one attempt each.
    assert attempts(cluster, "unschedulable") - unschedulable == 0
    assert attempts(cluster, "scheduled") - scheduled == len(gang)
    assert len(set(placed.values())) == 4


def test_a_flood_of_lone_pods_never_takes_a_nominated_members_gpus(cluster, ns):
    """A backlog of lone pods ahead of the members in kube-scheduler's queue (created earlier, the
    same priority: PrioritySort), twice the cluster's GPUs, fills every node but the ones railyard
    nominated the members to; the members bind where nominated. kube-scheduler is paused
    (SIGSTOP) while the pods are created and released, so the order is the queue's, not a race."""
    core = cluster.core
    (scheduler,) = [p for p in processes.recorded(cluster.workdir) if p.name == "kube-scheduler"]
    flood = [gpu_pod(unique("lone"), 8) for _ in range(2 * NODES)]
    for pod in flood:
        pod["spec"]["schedulingGates"] = [{"name": HOLD}]  # the test's own: released after the members
    gang = gang_pods(unique("g"), 4, gpus=8)
    os.kill(scheduler.pid, signal.SIGSTOP)
    try:
        create_pods(core, ns, flood)
        create_pods(core, ns, gang)

        def nominated():
            pods = pods_by_name(core, ns)
            got = {n: pods[n].status.nominated_node_name for n in names_of(gang)}
            gated = [n for n in names_of(gang) if GATE in [g.name for g in pods[n].spec.scheduling_gates or []]]
            return got if all(got.values()) and not gated else None

        reserved = wait_for(nominated, 60, "railyard to nominate the members and lift their gate")
        for name in names_of(flood):
            core.patch_namespaced_pod(name, ns, {"spec": {"schedulingGates": [{"$patch": "delete", "name": HOLD}]}})
    finally:
        os.kill(scheduler.pid, signal.SIGCONT)
    assert len(set(reserved.values())) == 4
    with BindingWatch(core, ns) as watch:
        placed = watch.wait_bound(names_of(gang), 90, "the gang")
        watch.assert_whole()
    wait_for(lambda: sum(1 for n in names_of(flood) if pods_by_name(core, ns)[n].spec.node_name) >= NODES - 4, 90,
             "the lone pods to fill the other nodes")
    assert placed == reserved
    pods = pods_by_name(core, ns)
    landed = [pods[n].spec.node_name for n in names_of(flood) if pods[n].spec.node_name]
    assert len(landed) == NODES - 4 and not set(landed) & set(reserved.values())


def test_a_gang_held_by_another_components_gate_is_planned_once_that_gate_goes(cluster, ns):
    core = cluster.core
    gang = gang_pods(unique("g"), 2, gpus=8)
    for pod in gang:
        pod["spec"]["schedulingGates"] = [{"name": HOLD}]
    create_pods(core, ns, gang)
    wait_for(lambda: [e for e in core.list_namespaced_event(ns).items if e.reason == "GangWaiting"], 30,
             "railyard to say the gang waits for the other gate")
    pods = pods_by_name(core, ns)
    assert all(p.status.nominated_node_name is None for p in pods.values())  # nothing planned
    for name in names_of(gang):
        core.patch_namespaced_pod(name, ns, {"spec": {"schedulingGates": [{"$patch": "delete", "name": HOLD}]}})
    with BindingWatch(core, ns) as watch:
        watch.wait_bound(names_of(gang), 60, "the gang")
        watch.assert_whole()


@pytest.fixture(scope="module")
def starving_cluster(local_cluster):
    """4 nodes x 8 GPUs in two NVLink domains (b1-r1-n1: h1 h2; b1-r1-n2: h1 h2), and a
    starvation bound of 3 s."""
    return local_cluster(topology="blocks=1 racks=1 nvl=2 nodes=2 gpus=8 scheme=topograph", extender=True,
                         extender_settings={"gangs.starvation_seconds": 3})


def test_a_starving_gangs_drain_holds_against_lone_pods(starving_cluster):
    """Past the starvation bound a gang's drain holds the GPUs of its domain as they free up.
    Lone pods no longer pass railyard's filter: the gated members are nominated to their drain
    slots' nodes, and kube-scheduler keeps a lone pod of the same priority off them. Fails
    without the nominations: the lone pod takes the first drained node that frees."""
    cluster = starving_cluster
    core = cluster.core
    ns = namespace(core)
    try:
        fill = create_pods(core, ns, [gpu_pod(unique("fill"), 8) for _ in range(4)])
        running = wait_for_phase(core, ns, fill, "Running", timeout=60)
        on = {p.spec.node_name: name for name, p in running.items()}
        gang = gang_pods(unique("g"), 2, gpus=8, required="nvlink")
        create_pods(core, ns, gang)

        def drained():
            pods = pods_by_name(core, ns)
            nodes = {pods[n].status.nominated_node_name for n in names_of(gang)}
            gated = all(GATE in [g.name for g in pods[n].spec.scheduling_gates or []] for n in names_of(gang))
            return nodes if gated and None not in nodes else None

        drain = sorted(wait_for(drained, 60, "the starving gang's members nominated to its drain, gated"))
        # Model: one NVLink domain's two nodes (the topograph names put the domain first).
        assert len(drain) == 2 and drain[0].rsplit("-", 1)[0] == drain[1].rsplit("-", 1)[0], drain
        late = gpu_pod(unique("late"), 8)
        core.delete_namespaced_pod(on[drain[0]], ns, grace_period_seconds=0)
        create_pods(core, ns, [late])
        message = wait_unschedulable(core, ns, late["metadata"]["name"])
        assert "Insufficient nvidia.com/gpu" in message, message
        with BindingWatch(core, ns) as watch:
            core.delete_namespaced_pod(on[drain[1]], ns, grace_period_seconds=0)
            placed = watch.wait_bound(names_of(gang), 60, "the gang, once its drain freed")
            watch.assert_whole()
        assert sorted(placed.values()) == drain
        assert not core.read_namespaced_pod(late["metadata"]["name"], ns).spec.node_name
        other = next(n for n in on if n not in drain)  # the lone pod was kept off the drain only
        core.delete_namespaced_pod(on[other], ns, grace_period_seconds=0)
        wait_for(lambda: core.read_namespaced_pod(late["metadata"]["name"], ns).spec.node_name == other, 60,
                 "the lone pod on the node freed outside the drain")
    finally:
        delete_pods(core, ns)
