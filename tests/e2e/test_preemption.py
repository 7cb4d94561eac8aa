"""Gang-aware preemption on the real kube-scheduler through railyard (issue 12), with
PriorityClasses, the Eviction API and PodDisruptionBudgets of the real API server.

One cluster for the module (``cluster up`` with the extender), 16 kwok nodes x 8 GPUs::

    block b1
      rack r1: nvl n1 (4 nodes)  nvl n2 (4 nodes)
      rack r2: nvl n1 (4 nodes)  nvl n2 (4 nodes)

Each test fills every node with one 8-GPU pod of low priority, then creates a 4 x 8-GPU gang
that requires one NVLink domain. The victims are the low-priority pods that disappeared; the
oracle is the node labels read back from the API server. A ``BindingWatch`` fails any test in
which a gang is seen partly bound.
"""

from __future__ import annotations

import time

import pytest
from kubernetes.client import PolicyV1Api, SchedulingV1Api

from .helpers import (
    BindingWatch, create_pods, delete_pods, gang_pods, gpu_pod, names_of, namespace, node_labels, wait_for,
    wait_for_phase, wait_released,
)

pytestmark = pytest.mark.e2e

TOPOLOGY = "blocks=1 racks=2 nvl=2 nodes=4 gpus=8 scheme=topograph"
NODES = [f"b1-r{r}-n{n}-h{h}" for r in (1, 2) for n in (1, 2) for h in range(1, 5)]
LEAF = "network.topology.nvidia.com/leaf"
NVLINK = "network.topology.nvidia.com/accelerator"
CLASSES = {"railyard-e2e-low": 100, "railyard-e2e-mid": 500, "railyard-e2e-high": 1000}
BIND_TIMEOUT = 150  # generous: other clusters share these 2 cores


@pytest.fixture(scope="module")
def cluster(local_cluster):
    c = local_cluster(topology=TOPOLOGY, extender=True)
    scheduling = SchedulingV1Api(c.core.api_client)
    for name, value in CLASSES.items():
        scheduling.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                          "metadata": {"name": name}, "value": value})
    return c


@pytest.fixture
def ns(cluster):
    name = namespace(cluster.core)
    yield name
    delete_pods(cluster.core, name)
    wait_released(cluster, name)


@pytest.fixture
def watch(cluster, ns):
    with BindingWatch(cluster.core, ns) as w:
        yield w
        w.assert_whole()


def classed(pod: dict, priority_class: str) -> dict:
    pod["spec"]["priorityClassName"] = priority_class
    return pod


def fill(core, ns: str, nodes=NODES, priority_class: str = "railyard-e2e-low", labels=None) -> dict[str, str]:
    """One 8-GPU pod per node, pinned by nodeName (as a DaemonSet-like filler): name -> node."""
    pods = {}
    for node in nodes:
        p = classed(gpu_pod(f"low-{node}", 8, labels=dict(labels(node) if labels else {})), priority_class)
        p["spec"]["nodeName"] = node
        pods[p["metadata"]["name"]] = node
        core.create_namespaced_pod(ns, p)
    wait_for_phase(core, ns, list(pods), "Running", timeout=120)
    return pods


def high_gang(name: str = "llama", size: int = 4, priority_class: str = "railyard-e2e-high") -> list[dict]:
    return [classed(p, priority_class) for p in gang_pods(name, size, required="nvlink")]


def domain_of(labels: dict[str, dict[str, str]], node: str) -> tuple[str, str]:
    return labels[node][LEAF], labels[node][NVLINK]


def gone(core, ns: str, pods: dict[str, str]) -> dict[str, str]:
    present = {p.metadata.name for p in core.list_namespaced_pod(ns).items}
    return {name: node for name, node in pods.items() if name not in present}


def events(core, ns: str, reason: str) -> list[str]:
    return [e.message for e in core.list_namespaced_event(ns).items if e.reason == reason]


def bound_gang(cluster, ns: str, watch: BindingWatch, members: list[dict]) -> dict[str, str]:
    """Wait until the gang is bound whole; on a timeout, say what railyard and the pods said."""
    try:
        return watch.wait_bound(names_of(members), BIND_TIMEOUT, "the high-priority gang")
    except AssertionError as exc:
        said = [f"{e.reason} {e.involved_object.name}: {e.message}" for e in cluster.core.list_namespaced_event(ns).items
                if e.reason != "Scheduled"]
        gang = cluster.extender_gangs().get(f"{ns}/llama", {})
        raise AssertionError(f"{exc}; railyard: {gang.get('phase')}: {gang.get('reason')}; events: "
                             + " | ".join(said[-12:])) from None


def test_a_full_cluster_gives_up_one_nvlink_domain_and_the_gang_binds_whole_there(cluster, ns, watch):
    core = cluster.core
    fillers = fill(core, ns)
    members = high_gang()
    create_pods(core, ns, members)
    bound = bound_gang(cluster, ns, watch, members)
    labels = node_labels(core)
    used = {domain_of(labels, n) for n in bound.values()}
    assert len(used) == 1, bound
    victims = gone(core, ns, fillers)
    # Only inside that one NVLink domain, no more than needed: exactly its 4 pods.
    assert {domain_of(labels, n) for n in victims.values()} == used
    assert sorted(victims.values()) == sorted(bound.values())
    time.sleep(3)
    assert gone(core, ns, fillers) == victims, "no eviction after the gang bound"
    (leaf, nvl) = used.pop()
    reason = (f"evicting 4 pods of priority 100 in nvlink b1/{leaf}/{nvl} to place gang {ns}/llama "
              f"(priority 1000): 32 GPUs needed, 0 free")
    wait_for(lambda: reason in events(core, ns, "Preempting"), 30, f"the Preempting event {reason!r}")
    assert len(events(core, ns, "Preempted")) == 4


def run_gang(core, ns: str, nodes: list[str]) -> list[str]:
    """A low-priority gang already running on ``nodes`` (pinned by nodeName): its pod names."""
    running = gang_pods("run", len(nodes))
    for p, node in zip(running, nodes):
        classed(p, "railyard-e2e-low")["spec"]["nodeName"] = node
    create_pods(core, ns, running)
    wait_for_phase(core, ns, names_of(running), "Running", timeout=120)
    return names_of(running)


def test_a_low_priority_running_gang_in_the_only_domain_goes_whole_members_outside_included(cluster, ns, watch):
    core = cluster.core
    # The gang runs on r1/n1 and one node of r2/n2; every other node holds a pod of the
    # preemptor's own priority, which it never takes: clearing r1/n1 evicts the gang whole.
    run_nodes = [n for n in NODES if n.startswith("b1-r1-n1-")] + ["b1-r2-n2-h4"]
    running = run_gang(core, ns, run_nodes)
    fillers = fill(core, ns, [n for n in NODES if n not in run_nodes], priority_class="railyard-e2e-high")
    members = high_gang()
    create_pods(core, ns, members)
    bound = bound_gang(cluster, ns, watch, members)
    assert sorted(bound.values()) == sorted(run_nodes[:4])
    present = {p.metadata.name for p in core.list_namespaced_pod(ns).items}
    assert not present & set(running), "the running gang is evicted whole, its member on r2/n2 too"
    assert gone(core, ns, fillers) == {}, "nothing of equal priority is evicted"


def test_a_low_priority_running_gang_that_would_cost_more_is_not_touched_at_all(cluster, ns, watch):
    core = cluster.core
    # The gang's two members sit in r1/n1 and r2/n2: clearing either costs 5 pods, r1/n2 or
    # r2/n1 costs 4 single pods. The gang keeps running, every member of it.
    running = run_gang(core, ns, ["b1-r1-n1-h1", "b1-r2-n2-h1"])
    fillers = fill(core, ns, [n for n in NODES if n not in ("b1-r1-n1-h1", "b1-r2-n2-h1")])
    members = high_gang()
    create_pods(core, ns, members)
    bound = bound_gang(cluster, ns, watch, members)
    labels = node_labels(core)
    assert {domain_of(labels, n) for n in bound.values()} in ({("r1", "n2")}, {("r2", "n1")})
    victims = gone(core, ns, fillers)
    assert sorted(victims.values()) == sorted(bound.values())
    wait_for_phase(core, ns, running, "Running", timeout=5)


def test_a_budget_that_blocks_a_victim_moves_the_choice(cluster, ns, watch):
    core = cluster.core
    labels = node_labels(core)
    # Every domain but one has a pod under a PodDisruptionBudget (no disruption controller runs
    # here, so the budget allows no disruption at all): the choice moves to the unguarded one.
    guarded = {"b1-r1-n1-h2", "b1-r1-n2-h3", "b1-r2-n1-h1"}
    fillers = fill(core, ns, labels=lambda n: {"guard": "yes"} if n in guarded else {})
    PolicyV1Api(core.api_client).create_namespaced_pod_disruption_budget(ns, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"guard": "yes"}}}})
    members = high_gang()
    create_pods(core, ns, members)
    bound = bound_gang(cluster, ns, watch, members)
    assert {domain_of(labels, n) for n in bound.values()} == {("r2", "n2")}
    victims = gone(core, ns, fillers)
    assert sorted(victims.values()) == sorted(n for n in NODES if n.startswith("b1-r2-n2-")), victims
    assert not set(victims.values()) & guarded


def test_equal_priority_never_preempts(cluster, ns, watch):
    core = cluster.core
    fillers = fill(core, ns, priority_class="railyard-e2e-high")
    members = high_gang()
    create_pods(core, ns, members)

    def unschedulable() -> bool:
        pods = {p.metadata.name: p for p in core.list_namespaced_pod(ns).items}
        return all(any(c.type == "PodScheduled" and c.status == "False" for c in (pods[n].status.conditions or []))
                   for n in names_of(members))

    wait_for(unschedulable, 60, "every member to be tried and refused")
    time.sleep(5)
    assert gone(core, ns, fillers) == {}
    assert watch.bound(names_of(members)) == {}
