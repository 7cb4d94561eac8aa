"""A sliced gang on the real kube-scheduler through railyard: bound whole, every slice inside one
NVLink domain, and every pod carrying its topology address before it is bound.

The pods are the ones ``examples/sliced-job.yaml``'s Indexed Job would create (there is no Job
controller here): 8 workers x 8 GPUs, slices of 4 inside one NVLink domain, all inside one
leaf. In leaf r1 two nodes are busy, so r1 has exactly the 8 free nodes the gang needs (the
unsliced best fit) but only one NVLink domain with 4 free: the sliced gang must go to r2.
"""

from __future__ import annotations

import threading
from pathlib import Path

import kubernetes
import pytest
import yaml

from .helpers import BindingWatch, create_pods, delete_pods, namespace, node_labels, wait_for_phase, wait_released

pytestmark = pytest.mark.e2e

TOPOLOGY = """
scheme topograph
gpus 8
block b1
  rack r1
    nvl n1: a1[0/8] a2[0/8] a3 a4 a5
    nvl n2: b1 b2 b3 b4 b5
  rack r2
    nvl n1: c1 c2 c3 c4 c5
    nvl n2: d1 d2 d3 d4 d5
"""
SPINE = "network.topology.nvidia.com/spine"
LEAF = "network.topology.nvidia.com/leaf"
NVLINK = "network.topology.nvidia.com/accelerator"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sliced-job.yaml"
BIND_TIMEOUT = 150


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(topology=TOPOLOGY, extender=True)


@pytest.fixture
def ns(cluster):
    name = namespace(cluster.core)
    yield name
    delete_pods(cluster.core, name)
    wait_released(cluster, name)


def example_pods(sliced: bool = True) -> list[dict]:
    """The pods of examples/sliced-job.yaml, as its Indexed Job would create them."""
    job = yaml.safe_load(EXAMPLE.read_text())
    template = job["spec"]["template"]
    pods = []
    for i in range(job["spec"]["completions"]):
        annotations = dict(template["metadata"]["annotations"])
        if not sliced:
            annotations = {k: v for k, v in annotations.items() if "slice" not in k}
        pods.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job['metadata']['name']}-{i}",
                         "labels": {**template["metadata"]["labels"], "batch.kubernetes.io/job-completion-index": str(i)},
                         "annotations": annotations},
            "spec": {**template["spec"], "terminationGracePeriodSeconds": 0},
        })
    return pods


class PodVersions:
    """Every version of the namespace's pods the API server's watch shows, from before the
    first pod exists: (name, node, phase, annotations)."""

    def __init__(self, core, ns: str) -> None:
        self.core, self.ns = core, ns
        self.versions: list[tuple[str, str, str, dict]] = []
        self._watch = kubernetes.watch.Watch()
        rv = core.list_namespaced_pod(ns).metadata.resource_version
        self._thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        self._thread.start()

    def _run(self, rv: str) -> None:
        try:
            for event in self._watch.stream(self.core.list_namespaced_pod, self.ns, resource_version=rv,
                                            timeout_seconds=BIND_TIMEOUT * 2):
                pod = event["object"]
                self.versions.append((pod.metadata.name, pod.spec.node_name or "", pod.status.phase or "",
                                      dict(pod.metadata.annotations or {})))
        except Exception:  # the stream closed by stop(): every version before it is recorded
            pass

    def stop(self) -> None:
        self._watch.stop()


def test_a_sliced_gang_binds_whole_each_slice_in_one_nvlink_domain_with_its_address_on_every_pod(cluster, ns):
    # (railyard's own RBAC: the extender runs as its ServiceAccount, manifests/base/extender-rbac)
    core = cluster.core
    versions = PodVersions(core, ns)
    pods = example_pods()
    with BindingWatch(core, ns) as watch:
        names = create_pods(core, ns, pods)
        watch.wait_bound(names, BIND_TIMEOUT, "the sliced gang")
        watch.assert_whole({"llama-tp4": names})
    running = wait_for_phase(core, ns, names, "Running", timeout=60)
    versions.stop()
    labels = node_labels(core)
    node_of = {n: running[n].spec.node_name for n in names}

    def domain(name: str, *keys: str) -> str:
        return "/".join(labels[node_of[name]][k] for k in keys)

    # Ranks 0-3 and 4-7 (the completion index) each share one NVLink domain, in leaf r2.
    assert len(set(node_of.values())) == 8
    assert {domain(n, SPINE, LEAF) for n in names} == {"b1/r2"}
    assert len({domain(n, SPINE, LEAF, NVLINK) for n in names[:4]}) == 1
    assert len({domain(n, SPINE, LEAF, NVLINK) for n in names[4:]}) == 1

    # Each pod's address, as the plan gave it and its node's labels say.
    for i, name in enumerate(names):
        assert {k: v for k, v in running[name].metadata.annotations.items() if k.startswith("railyard.io/")
                and k not in pods[i]["metadata"]["annotations"] and k != "railyard.io/binding"} == {
            "railyard.io/rank": str(i), "railyard.io/slice": str(i // 4),
            "railyard.io/domain.spine": domain(name, SPINE), "railyard.io/domain.leaf": domain(name, SPINE, LEAF),
            "railyard.io/domain.nvlink": domain(name, SPINE, LEAF, NVLINK)}, name
    # Annotated before it is bound (with its Binding round, in one patch), so every version of
    # every pod the watch shows bound, Pending or Running, has its rank.
    bound = [(name, phase, notes) for name, node, phase, notes in versions.versions if node]
    assert {name for name, _, _ in bound} == set(names)
    assert all("railyard.io/rank" in notes and "railyard.io/binding" in notes for _, _, notes in bound)
    assert {name for name, phase, _ in bound if phase == "Pending"} == set(names)  # bound, not yet running
    assert {name for name, node, _, notes in versions.versions if not node and "railyard.io/rank" in notes} == set(names)

    # railyard's own view of the mapping says the same.
    view = cluster.extender_gangs()[f"{ns}/llama-tp4"]
    assert view["slices"] == {"size": 4, "level": NVLINK, "count": 2}
    assert [(r["rank"], r["pod"], r["node"]) for r in view["ranks"]] == [
        (i, f"{ns}/{name}", node_of[name]) for i, name in enumerate(names)]


def test_the_same_gang_unsliced_takes_the_exact_fit_across_two_nvlink_domains(cluster, ns):
    core = cluster.core
    pods = example_pods(sliced=False)
    with BindingWatch(core, ns) as watch:
        names = create_pods(core, ns, pods)
        bound = watch.wait_bound(names, BIND_TIMEOUT, "the unsliced gang")
        watch.assert_whole({"llama-tp4": names})
    labels = node_labels(core)
    assert {labels[n][LEAF] for n in bound.values()} == {"r1"}  # exactly its 8 free nodes
    assert {labels[n][NVLINK] for n in bound.values()} == {"n1", "n2"}
    assert "railyard.io/slice" not in core.read_namespaced_pod(names[0], ns).metadata.annotations
