"""What Slurm users reach for, on the real kube-scheduler, kwok nodes and the real extender
process (issue 26, docs/slurm.md): a preferred NVLink level with a bounded wait
(``--switches=1@max-time``).

    leaf r1:  nvl n1: a1 a2      nvl n2: b1 b2        (8 GPUs each)

``busy-a1`` and ``busy-b1`` take a1 and b1 whole (bound by ``spec.nodeName``, as a running job
would be), so no NVLink domain has the 2 x 8 GPUs the gang wants while leaf r1 has them (a2, b2).
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
)

pytestmark = pytest.mark.e2e

TOPOLOGY = """
scheme topograph
gpus 8
block b1
  rack r1
    nvl n1: a1 a2
    nvl n2: b1 b2
"""
RETRY = 25
"""kube-scheduler retries a pod whose filter erred after its backoff (at most 10 s), plus binding."""


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(topology=TOPOLOGY, extender=True)


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
    create_pods(cluster.core, ns, [busy("a1"), busy("b1")])
    wait_for_phase(cluster.core, ns, ["busy-a1", "busy-b1"], "Running")
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
    create_pods(cluster.core, ns, [busy("a1"), busy("b1")])
    wait_for_phase(cluster.core, ns, ["busy-a1", "busy-b1"], "Running")
    members = [p["metadata"]["name"] for p in patient_gang("w", wait)]
    started = time.monotonic()
    create_pods(cluster.core, ns, patient_gang("w", wait))
    waiting_reason(cluster, ns, "w")
    wait_for(lambda: time.monotonic() - started > wait - 2, wait, "most of the wait to pass", interval=0.5)
    assert nodes_of(cluster.core, ns, members) == set(), "bound wider within its wait"
    wait_for_phase(cluster.core, ns, members, "Running", timeout=wait + RETRY)
    assert time.monotonic() - started >= wait
    assert nodes_of(cluster.core, ns, members) == {"a2", "b2"}
