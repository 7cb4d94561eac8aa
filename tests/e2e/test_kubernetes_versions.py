"""railyard on each supported Kubernetes version (issue 22): the few e2e cases a new kube-scheduler
can break, run once per version on one cluster each (``local_cluster(kubernetes_version=...)``).

Why these: the extender protocol and the scheduler configuration are what a version changes under
railyard, and each case below goes through a different part of them:

- gangs bind whole in the narrowest domain: filter, prioritize and the held bind (every verb);
- a member deleted while its gang waits at bind: the fault path (release, plan again, bind whole);
- preemption for a gang: the ``preempt`` verb, whose arguments 1.38 changed (a node may come
  with an empty victim list);
- Workload-API gangs (``spec.schedulingGroup``, PodGroup ``scheduling.k8s.io``) with
  kube-scheduler's own gang gate on, as GA will have it by default (``GenericWorkload`` on, the
  ``GangScheduling`` plugin in the default profile): railyard places them, the two gates never
  deadlock two gangs, and who preempts for a PodGroup.

The rest of the suite runs on the default version (1.37.2) only. The cluster of one version is
stopped before the next one starts (two shared cores).

One cluster per version, 16 kwok nodes x 8 GPUs::

    block b1
      rack r1: nvl n1 (4 nodes)  nvl n2 (4 nodes)
      rack r2: nvl n1 (4 nodes)  nvl n2 (4 nodes)

with ``GenericWorkload`` + ``TopologyAwareWorkloadScheduling`` on and ``scheduling.k8s.io/v1beta1``
served (bench arm C's gates), and two kube-scheduler profiles: ``default-scheduler`` with the
GangScheduling plugin on (kube-scheduler holds PodGroup members too) and ``railyard`` with it
off (railyard the only gate). Where pods land is checked against the node labels read back
from the API server.
"""

from __future__ import annotations

import time
from itertools import zip_longest

import pytest
from kubernetes.client import SchedulingV1Api, VersionApi

from extender.localcluster import cluster as localcluster

from .helpers import (
    SIM_RUNTIME, BindingWatch, create_pods, create_podgroup, delete_pods, gang_pods, gpu_pod, names_of, namespace,
    node_labels, wait_for, wait_for_phase, wait_released,
)
from .native import KUBERNETES, NATIVE_GATES, NATIVE_RUNTIME_CONFIG, PLUGIN_OFF, PLUGIN_ON, member, scheduler_config

pytestmark = pytest.mark.e2e

VERSIONS = ("1.37.2", "1.38.0-beta.0")
TOPOLOGY = "blocks=1 racks=2 nvl=2 nodes=4 gpus=8 scheme=topograph"
NODES = [f"b1-r{r}-n{n}-h{h}" for r in (1, 2) for n in (1, 2) for h in range(1, 5)]
LEAF = "network.topology.nvidia.com/leaf"
NVLINK = "network.topology.nvidia.com/accelerator"
CLASSES = {"railyard-e2e-low": 100, "railyard-e2e-high": 1000}
BIND_TIMEOUT = 150  # generous: other clusters share these 2 cores


@pytest.fixture(scope="module", params=VERSIONS)
def cluster(request, local_cluster, tmp_path_factory):
    c = local_cluster(topology=TOPOLOGY, extender=True, kubernetes_version=request.param, controllers=False,
                      feature_gates=NATIVE_GATES, runtime_config=NATIVE_RUNTIME_CONFIG,
                      scheduler_config=scheduler_config(tmp_path_factory.mktemp("versions")))
    scheduling = SchedulingV1Api(c.core.api_client)
    for name, value in CLASSES.items():
        scheduling.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                          "metadata": {"name": name}, "value": value})
    yield c
    localcluster.down(c.workdir, quiet=True)  # before the next version's cluster starts


@pytest.fixture
def ns(cluster):
    name = namespace(cluster.core, "ver")
    yield name
    delete_pods(cluster.core, name)
    wait_released(cluster, name)


@pytest.fixture
def watch(cluster, ns):
    with BindingWatch(cluster.core, ns) as w:
        yield w
        w.assert_whole()


def domain(labels: dict[str, dict[str, str]], node: str, *keys: str) -> tuple[str, ...]:
    return tuple(labels[node][k] for k in keys)


def interleaved(*gangs: list[dict]) -> list[dict]:
    return [p for group in zip_longest(*gangs) for p in group if p is not None]


def test_the_cluster_runs_the_version_asked_for(cluster, request):
    assert VersionApi(cluster.core.api_client).get_code().git_version == f"v{request.node.callspec.params['cluster']}"


# -- the verbs: gangs whole in the narrowest domain ------------------------------------------------

def test_gangs_bind_whole_each_in_the_narrowest_domain(cluster, ns, watch):
    core = cluster.core
    gangs = {"four": gang_pods("four", 4, required="nvlink"),  # one NVLink domain holds 4
             "eight": gang_pods("eight", 8)}  # no NVLink domain holds 8: one rack does
    create_pods(core, ns, interleaved(gangs["eight"], gangs["four"]))
    members = {g: names_of(p) for g, p in gangs.items()}
    placed: dict[str, str] = {}
    for gang, names in members.items():
        placed |= watch.wait_bound(names, BIND_TIMEOUT, f"gang {gang}")
    watch.assert_whole(members)
    assert len(set(placed.values())) == 12, f"8-GPU pods share a node: {placed}"
    labels = node_labels(core)
    assert len({domain(labels, placed[n], LEAF, NVLINK) for n in members["four"]}) == 1, placed
    assert len({domain(labels, placed[n], LEAF) for n in members["eight"]}) == 1, placed


# -- a fault: a member lost while its gang waits at bind -------------------------------------------

def test_member_deleted_while_gang_waits_at_bind_releases_then_gang_binds_whole(cluster, ns, watch):
    core = cluster.core
    gang = gang_pods("held", 4, timeout_seconds=100)
    names = names_of(gang)

    def phase() -> str:
        return cluster.extender_gangs().get(f"{ns}/held", {}).get("phase", "")

    create_pods(core, ns, gang[:3])
    wait_for(lambda: phase() == "waiting at bind 3/4", BIND_TIMEOUT, "three members held")
    core.delete_namespaced_pod(names[2], ns, grace_period_seconds=0)
    wait_for(lambda: phase() == "waiting at bind 2/4", 60, "the gang released and its two members held again")
    assert watch.bound(names) == {}
    create_pods(core, ns, [gang_pods("held", 4, timeout_seconds=100)[2], gang[3]])
    watch.wait_bound(names, BIND_TIMEOUT, "the gang once complete again")
    watch.assert_whole({"held": names})


# -- preemption ------------------------------------------------------------------------------------

def classed(pod: dict, priority_class: str) -> dict:
    pod["spec"]["priorityClassName"] = priority_class
    return pod


def fill(core, ns: str) -> dict[str, str]:
    """One low-priority 8-GPU pod pinned to every node: name -> node."""
    pods = {}
    for node in NODES:
        p = classed(gpu_pod(f"low-{node}", 8), "railyard-e2e-low")
        p["spec"]["nodeName"] = node
        pods[p["metadata"]["name"]] = node
        core.create_namespaced_pod(ns, p)
    wait_for_phase(core, ns, list(pods), "Running", timeout=120)
    return pods


def gone(core, ns: str, pods: dict[str, str]) -> dict[str, str]:
    present = {p.metadata.name for p in core.list_namespaced_pod(ns).items}
    return {name: node for name, node in pods.items() if name not in present}


def preempting_events(core, ns: str) -> list[str]:
    """railyard's own ``Preempting`` Events: written only when railyard chose the victims."""
    return [e.message for e in core.list_namespaced_event(ns).items if e.reason == "Preempting"]


def bound_gang(cluster, ns: str, watch: BindingWatch, members: list[dict], gang: str) -> dict[str, str]:
    """Wait until the gang is bound whole; on a timeout, say what railyard and the pods said."""
    try:
        return watch.wait_bound(names_of(members), BIND_TIMEOUT, f"gang {gang}")
    except AssertionError as exc:
        said = [f"{e.reason} {e.involved_object.name}: {e.message}" for e in cluster.core.list_namespaced_event(ns).items
                if e.reason != "Scheduled"]
        state = cluster.extender_gangs().get(f"{ns}/{gang}", {})
        raise AssertionError(f"{exc}; railyard: {state.get('phase')}: {state.get('reason')}; events: "
                             + " | ".join(said[-12:])) from None


def assert_cleared_one_nvlink_domain(core, ns: str, bound: dict[str, str], fillers: dict[str, str]) -> None:
    labels = node_labels(core)
    used = {domain(labels, n, LEAF, NVLINK) for n in bound.values()}
    assert len(used) == 1, bound
    victims = gone(core, ns, fillers)
    assert sorted(victims.values()) == sorted(bound.values()), f"victims {victims}, gang on {bound}"


def test_railyard_preempts_one_nvlink_domain_for_a_gang(cluster, ns, watch):
    core = cluster.core
    fillers = fill(core, ns)
    members = [classed(p, "railyard-e2e-high") for p in gang_pods("llama", 4, required="nvlink")]
    create_pods(core, ns, members)
    bound = bound_gang(cluster, ns, watch, members, "llama")
    assert_cleared_one_nvlink_domain(core, ns, bound, fillers)
    wait_for(lambda: any(m.startswith("evicting 4 pods of priority 100 in nvlink ") for m in preempting_events(core, ns)),
             30, "railyard's Preempting event")


def high_podgroup(core, ns: str, profile: str) -> list[dict]:
    # A pod group has one priority, its own: kube-scheduler refuses members whose priority differs.
    create_podgroup(core.api_client, KUBERNETES, ns, "g", {"schedulingPolicy": {"gang": {"minCount": 4}},
                                                            "schedulingConstraints": {"topology": [{"key": NVLINK}]},
                                                            "priorityClassName": "railyard-e2e-high"})
    members = [classed(member(f"g-{i}", scheduling_group="g", scheduler_name=profile), "railyard-e2e-high")
               for i in range(4)]
    create_pods(core, ns, members)
    return members


def test_railyard_preempts_one_nvlink_domain_for_a_podgroup_gang(cluster, ns, watch):
    # kube-scheduler schedules these pods in a pod-group cycle and never calls railyard's
    # preempt verb there, but it still calls filter for them (with the nodes its own filters
    # pass); railyard chooses and evicts from there. Before it did, nothing was evicted on
    # 1.37.2: the gang waited on the full cluster for good.
    core = cluster.core
    fillers = fill(core, ns)
    members = high_podgroup(core, ns, PLUGIN_ON)
    bound = bound_gang(cluster, ns, watch, members, "g")
    assert_cleared_one_nvlink_domain(core, ns, bound, fillers)
    assert any(m.startswith("evicting 4 pods of priority 100 in nvlink ") for m in preempting_events(core, ns))


def test_with_the_gang_plugin_off_a_podgroup_gang_preempts_one_nvlink_domain_all_the_same(cluster, ns, watch):
    # In a profile with GangScheduling disabled but the topology-aware plugins on
    # (TopologyAwareWorkloadScheduling), a PodGroup gang that fits no node ends its pod-group
    # cycle in a scheduler error before any preemption or extender call (1.37.2: PodGroupPodsCount's
    # NormalizePlacementScore; 1.38.0-beta.0: "parent pod group encountered an error"). Before
    # gang members were gated, railyard never heard of such a gang and nothing was evicted. Now
    # railyard plans it from its watch while it is gated, chooses the victims itself (one
    # NVLink domain) and releases it once they are gone: kube-scheduler tries it only then.
    core = cluster.core
    fillers = fill(core, ns)
    members = high_podgroup(core, ns, PLUGIN_OFF)
    bound = bound_gang(cluster, ns, watch, members, "g")
    assert_cleared_one_nvlink_domain(core, ns, bound, fillers)
    assert any(m.startswith("evicting 4 pods of priority 100 in nvlink ") for m in preempting_events(core, ns))


# -- the Workload API with kube-scheduler's gang gate on ---------------------------------------------

def podgroup_gang(client, ns: str, name: str, size: int, profile: str, sim_runtime: str | None = None) -> list[dict]:
    create_podgroup(client, KUBERNETES, ns, name, {"schedulingPolicy": {"gang": {"minCount": size}}})
    pods = [member(f"{name}-{i}", scheduling_group=name, scheduler_name=profile) for i in range(size)]
    if sim_runtime:
        for p in pods:
            p["metadata"]["annotations"][SIM_RUNTIME] = sim_runtime
    return pods


@pytest.mark.parametrize("profile", [PLUGIN_ON, PLUGIN_OFF])
def test_two_podgroup_gangs_of_60_percent_one_binds_then_the_other_no_deadlock(cluster, ns, watch, profile):
    # Both gates at once (plugin on): kube-scheduler's Permit holds members until minCount are
    # assumed, railyard holds them at bind until the gang is whole. Neither gang may hold part
    # of the cluster while the other holds the rest.
    core = cluster.core
    size = len(NODES) * 6 // 10
    east = podgroup_gang(core.api_client, ns, "east", size, profile, sim_runtime="15s")
    west = podgroup_gang(core.api_client, ns, "west", size, profile, sim_runtime="15s")
    create_pods(core, ns, interleaved(east, west))
    members = {"east": names_of(east), "west": names_of(west)}

    def one_whole() -> str | None:
        return next((g for g, names in members.items() if len(watch.bound(names)) == len(names)), None)

    first = wait_for(one_whole, BIND_TIMEOUT, "one of the two PodGroup gangs to bind whole")
    second = "west" if first == "east" else "east"
    assert watch.bound(members[second]) == {}, "the second gang must hold nothing while the first runs"
    wait_for_phase(core, ns, members[first], "Succeeded", timeout=BIND_TIMEOUT)
    watch.wait_bound(members[second], BIND_TIMEOUT, f"gang {second} after {first} finished")
    watch.assert_whole(members)
    assert min(watch.first_seen(members[second])) >= min(watch.first_seen(members[first], "Succeeded"))
    gangs = cluster.extender_gangs()
    assert gangs[f"{ns}/{second}"]["reason"] == f"gang {ns}/{second} bound: {size} pods", gangs[f"{ns}/{second}"]
