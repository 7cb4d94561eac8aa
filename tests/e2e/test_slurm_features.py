"""What Slurm users reach for, on the real kube-scheduler, kwok nodes and the real extender
process (issue 26, docs/slurm.md): a preferred NVLink level with a bounded wait
(``--switches=1@max-time``) and an exclusive NVLink domain (``--exclusive=topo``), with lone GPU
pods steered through railyard (``cluster up --steer-lone-pods``).

    leaf r1:  nvl n1: a1 a2      nvl n2: b1 b2        (8 GPUs each)
    leaf r2:  nvl n3: c1 c2 c3   nvl n4: d1 d2        (the exclusive gang's cluster)

For the patient gang, ``busy-*`` pods take a1, b1 and leaf r2 whole (bound by ``spec.nodeName``,
as running jobs would be), so no NVLink domain has the 2 x 8 GPUs the gang wants while leaf r1
has them (a2, b2).
"""

from __future__ import annotations

import re
import time

import pytest

from .helpers import (
    POD_GROUP,
    RANK,
    create_pods,
    delete_pods,
    gpu_pod,
    namespace,
    pods_by_name,
    wait_for,
    wait_for_phase,
    wait_released,
    wait_unschedulable,
)

pytestmark = pytest.mark.e2e

TOPOLOGY = """
scheme topograph
gpus 8
block b1
  rack r1
    nvl n1: a1 a2
    nvl n2: b1 b2
  rack r2
    nvl n3: c1 c2 c3
    nvl n4: d1 d2
"""
RETRY = 25
"""kube-scheduler retries a pod whose filter erred after its backoff (at most 10 s), plus binding."""


@pytest.fixture(scope="module")
def cluster(local_cluster):
    # Lone GPU pods steered (docs/reference.md, "Steering lone GPU pods"): an exclusive domain
    # holds against lone pods only when they reach railyard's filter. Gang members are gated and
    # released whole either way.
    return local_cluster(topology=TOPOLOGY, extender=True, steer_lone_pods=True)


@pytest.fixture
def ns(cluster):
    name = namespace(cluster.core)
    yield name
    delete_pods(cluster.core, name)
    wait_released(cluster, name)


def busy(node: str) -> dict:
    pod = gpu_pod(f"busy-{node}", 8)
    pod["spec"]["nodeName"] = node
    return pod


LEAF_R2 = ("c1", "c2", "c3", "d1", "d2")


def fill(cluster, ns: str, *nodes: str) -> None:
    wait_for_phase(cluster.core, ns, create_pods(cluster.core, ns, [busy(n) for n in nodes]), "Running")


def patient_gang(name: str, wait: int) -> list[dict]:
    annotations = {"railyard.io/min-member": "2", "railyard.io/preferred-topology": "nvlink",
                   "railyard.io/preferred-topology-wait-seconds": str(wait)}
    return [gpu_pod(f"{name}-{i}", 8, labels={POD_GROUP: name, RANK: str(i)}, annotations=annotations)
            for i in range(2)]


def nodes_of(core, ns: str, names: list[str]) -> set[str]:
    pods = pods_by_name(core, ns)
    return {pods[n].spec.node_name for n in names if pods[n].spec.node_name}


def waiting_reason(cluster, ns: str, gang: str) -> str:
    return wait_for(lambda: (cluster.extender_gangs().get(f"{ns}/{gang}") or {}).get("reason", "").find(
        "holding nothing") >= 0 and cluster.extender_gangs()[f"{ns}/{gang}"]["reason"], 30,
        f"gang {gang} to wait for its preferred level")


def test_a_patient_gang_binds_in_the_nvlink_domain_that_frees_within_its_wait(cluster, ns):
    fill(cluster, ns, "a1", "b1", *LEAF_R2)
    members = [p["metadata"]["name"] for p in patient_gang("g", 60)]
    started = time.monotonic()
    create_pods(cluster.core, ns, patient_gang("g", 60))
    reason = waiting_reason(cluster, ns, "g")
    # kube-scheduler's own NodeResourcesFit leaves the busy node out: "refused by its filters".
    assert re.search(r"best nvlink b1/r1/n[12] fits 1 \(.*8 GPUs in use\); it waits (60|59|58)s more \(of 60s\) "
                     r"for one, holding nothing, then takes a wider domain: it fits now within "
                     r"network.topology.nvidia.com/leaf b1/r1$", reason), reason
    time.sleep(3)
    assert nodes_of(cluster.core, ns, members) == set(), "bound wider within its wait"
    cluster.core.delete_namespaced_pod("busy-b1", ns, grace_period_seconds=0)
    wait_for_phase(cluster.core, ns, members, "Running", timeout=RETRY)
    assert time.monotonic() - started < 60
    assert nodes_of(cluster.core, ns, members) == {"b1", "b2"}


def test_a_patient_gang_binds_wider_once_its_wait_ends_with_no_domain_free(cluster, ns):
    wait = 10
    fill(cluster, ns, "a1", "b1", *LEAF_R2)
    members = [p["metadata"]["name"] for p in patient_gang("w", wait)]
    started = time.monotonic()
    create_pods(cluster.core, ns, patient_gang("w", wait))
    waiting_reason(cluster, ns, "w")
    wait_for(lambda: time.monotonic() - started > wait - 2, wait, "most of the wait to pass", interval=0.5)
    assert nodes_of(cluster.core, ns, members) == set(), "bound wider within its wait"
    wait_for_phase(cluster.core, ns, members, "Running", timeout=wait + RETRY)
    assert time.monotonic() - started >= wait
    assert nodes_of(cluster.core, ns, members) == {"a2", "b2"}


def test_an_exclusive_gangs_domain_stays_free_of_lone_pods_while_it_runs(cluster, ns):
    # Every node of leaf r1 is taken, and d1 runs a 1-GPU pod: the one clean NVLink domain
    # with room for 2 x 8 GPUs is n3, where c3 stays spare.
    create_pods(cluster.core, ns, [busy(n) for n in ("a1", "a2", "b1", "b2")])
    small = gpu_pod("busy-d1", 1)
    small["spec"]["nodeName"] = "d1"
    create_pods(cluster.core, ns, [small])
    wait_for_phase(cluster.core, ns, ["busy-a1", "busy-a2", "busy-b1", "busy-b2", "busy-d1"], "Running")
    annotations = {"railyard.io/min-member": "2", "railyard.io/exclusive-topology": "nvlink"}
    members = create_pods(cluster.core, ns, [
        gpu_pod(f"x-{i}", 8, labels={POD_GROUP: "x", RANK: str(i)}, annotations=annotations) for i in range(2)])
    wait_for_phase(cluster.core, ns, members, "Running", timeout=60)
    assert nodes_of(cluster.core, ns, members) <= {"c1", "c2", "c3"}
    spare = ({"c1", "c2", "c3"} - nodes_of(cluster.core, ns, members)).pop()
    reason = cluster.extender_gangs()[f"{ns}/x"]["reason"]
    assert reason.endswith("; it holds 1 nvlink domain exclusively (b1/r2/n3: 3 nodes, 24 GPUs, 8 of them kept free "
                           "of other pods) until its last pod ends"), reason

    # Lone pods: 8-GPU ones fit only d2 and the spare node; 1-GPU ones d1 and d2 too.
    lone = create_pods(cluster.core, ns, [gpu_pod("lone-8-0", 8), gpu_pod("lone-8-1", 8),
                                          gpu_pod("lone-1-0", 1), gpu_pod("lone-1-1", 1)])
    wait_for(lambda: nodes_of(cluster.core, ns, ["lone-8-0", "lone-8-1"]), 30, "an 8-GPU lone pod to bind")
    assert nodes_of(cluster.core, ns, ["lone-8-0", "lone-8-1"]) == {"d2"}
    message = wait_unschedulable(cluster.core, ns, "lone-8-1" if nodes_of(cluster.core, ns, ["lone-8-0"])
                                 else "lone-8-0")
    assert (f"node {spare} is in nvlink b1/r2/n3, held exclusively by gang {ns}/x "
            f"(railyard.io/exclusive-topology) until its last pod ends") in message, message
    wait_for(lambda: len(nodes_of(cluster.core, ns, ["lone-1-0", "lone-1-1"])) >= 1, 30, "1-GPU lone pods to bind")
    time.sleep(3)
    for name, pod in pods_by_name(cluster.core, ns).items():
        if name in lone:
            assert pod.spec.node_name not in {"c1", "c2", "c3"}, f"{name} landed in the exclusive domain"

    # Once the gang's pods end, its domain opens. kube-scheduler may retry the waiting lone pod on
    # the deletion before railyard's watch has seen it (refused again, it then waits for the next
    # cluster event): a pod created afterwards is that event, and both bind in the opened domain.
    for name in members:
        cluster.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    wait_for(lambda: not set(members) & set(pods_by_name(cluster.core, ns)), 30, "the gang's pods to be gone")
    time.sleep(2)
    waiting = [n for n in ("lone-8-0", "lone-8-1") if not nodes_of(cluster.core, ns, [n])]
    waiting += create_pods(cluster.core, ns, [gpu_pod("lone-8-after", 8)])
    wait_for_phase(cluster.core, ns, waiting, "Running", timeout=RETRY + 30)
    assert nodes_of(cluster.core, ns, waiting) <= {"c1", "c2", "c3"}
