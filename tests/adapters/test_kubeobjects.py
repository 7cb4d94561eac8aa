"""The translator: label presets, node and pod facts, gang precedence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender import topotext
from extender.adapters import kubeobjects as ko
from extender.core import gangspec
from tests.topologies import TRANSLATE, Cluster, gang, pod


def facts(nodes: list[dict]) -> list:
    return [TRANSLATE.node(n) for n in nodes]


def load(nodes: list[dict], pods: list[dict] = ()) -> Cluster:
    nodes = facts(nodes)
    return Cluster.load(nodes, ko.detect_levels(nodes), [TRANSLATE.pod(p) for p in pods])

DRAWING = """
block b1
  rack r1
    nvl n1: h1 h2
    nvl n2: h3 h4
  rack r2
    nvl n1: h5 h6
"""


def drawn(scheme: str, body: str = DRAWING) -> list[dict]:
    return topotext.load(f"scheme {scheme}\n{body}").nodes


@pytest.mark.parametrize(
    "scheme, levels",
    [
        ("topograph", ["network.topology.nvidia.com/block", "network.topology.nvidia.com/leaf",
                       "network.topology.nvidia.com/accelerator"]),
        ("topograph-v1", ["fabric.topograph.run/tier-1", "fabric.topograph.run/tier-0",
                          "accelerator.topograph.run/domain"]),
        ("gke", ["cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
                 "cloud.google.com/gce-topology-host"]),
        ("eks", ["topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-3",
                 "topology.k8s.aws/network-node-layer-4"]),
        ("eks+clique", ["topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-3",
                        ko.CLIQUE_CLUSTER, ko.CLIQUE]),
    ],
)
def test_presets_are_detected_and_place_alike(scheme, levels):
    nodes = drawn(scheme)
    choice = ko.detect_levels(facts(nodes))
    assert [lvl.key for lvl in choice.levels] == levels
    assert choice.problems == ()
    w = load(nodes)
    a, b = w.plan_pending(gang("a", 2, 8) + gang("b", 3, 8))
    assert a.level == levels[-1] and len(set(a.placement.values())) == 2
    # a took an NVLink domain of the smaller rack, so b fits the other rack (with clique, the
    # rack is also the physical NVLink domain: the narrower level of the two is reported).
    assert b.level == (levels[2] if "clique" in scheme else levels[1])


def test_oci_preset():
    nodes = drawn("oci", "block b1\n  rack r1: h1 h2\n  rack r2: h3\n")
    assert [lvl.key for lvl in ko.detect_levels(facts(nodes)).levels] == [
        "oci.oraclecloud.com/host.network_block_id", "oci.oraclecloud.com/host.rack_id"]


def test_topograph_v1_tiers_any_depth_highest_first():
    nodes = drawn("topograph-v1", "tier-3 a\n  tier-2 b\n    tier-1 c\n      tier-0 d\n        nvl x: h1 h2\n")
    assert [lvl.key for lvl in ko.detect_levels(facts(nodes)).levels] == [
        "fabric.topograph.run/tier-3", "fabric.topograph.run/tier-2", "fabric.topograph.run/tier-1",
        "fabric.topograph.run/tier-0", "accelerator.topograph.run/domain"]


def test_clique_keys_on_the_full_value():
    # Clique id 32766 appears in two racks (ClusterUUIDs): two domains, never one.
    nodes = drawn("clique", "rack uuidA\n  nvl 32766: h1 h2\nrack uuidB\n  nvl 32766: h3 h4\n")
    assert nodes[0]["metadata"]["labels"][ko.CLIQUE] == "uuidA.32766"
    w = load(nodes)
    assert [lvl.key for lvl in w.state.levels] == [ko.CLIQUE_CLUSTER, ko.CLIQUE]
    (a,) = w.plan_pending(gang("g", 3, 8, annotations={"railyard.io/required-topology": ko.CLIQUE}))
    assert not a.feasible
    assert "best nvlink uuidA/uuidA.32766 fits 2" in a.reason


def test_two_presets_on_one_cluster_are_reported():
    nodes = drawn("topograph") + drawn("gke", "block g1\n  rack s1\n    nvl x: g1 g2\n")
    choice = ko.detect_levels(facts(nodes))
    assert choice.preset == "topograph"
    assert any("2 node(s) also carry gke labels (e.g. g1)" in p for p in choice.problems)
    assert any("2 node(s) carry no topograph labels (e.g. g1)" in p for p in choice.problems)


def test_clique_beside_topograph_accelerator_is_ignored_and_said():
    nodes = drawn("topograph")
    nodes[0]["metadata"]["labels"][ko.CLIQUE] = "u.1"
    choice = ko.detect_levels(facts(nodes))
    assert ko.CLIQUE not in [lvl.key for lvl in choice.levels]
    assert any("nvidia.com/gpu.clique ignored" in p for p in choice.problems)


def test_no_topology_labels():
    nodes = [{"metadata": {"name": "a", "labels": {}}, "status": {"allocatable": {"nvidia.com/gpu": "8", "pods": "110"}}}]
    choice = ko.detect_levels(facts(nodes))
    assert choice.levels == () and "no known topology labels" in choice.problems[0]
    (a,) = load(nodes).plan_pending([pod("p", 8)])
    assert a.feasible and a.placement == {"ml/p": "a"}


def test_explicit_levels():
    choice = ko.explicit_levels(["a/x", "a/x", "kubernetes.io/hostname", "fabric.topograph.run/tier-2"])
    assert [lvl.key for lvl in choice.levels] == ["a/x", "fabric.topograph.run/tier-2"]
    assert len(choice.problems) == 2


def test_node_facts():
    node = {
        "metadata": {"name": "n", "labels": {"k": "v"}},
        "spec": {"unschedulable": True, "taints": [{"key": "a", "effect": "NoExecute"}]},
        "status": {"allocatable": {"nvidia.com/gpu": "4"}, "conditions": [{"type": "Ready", "status": "Unknown"}]},
    }
    f = ko.node_facts(node, "nvidia.com/gpu")
    levels = ko.explicit_levels(["k", "missing"]).levels
    assert (f.name, f.path(levels), f.gpus, f.unschedulable, f.ready) == ("n", ("v", None), 4, True, False)
    assert f.taints[0].key == "a"


@pytest.mark.parametrize(
    "spec, gpus",
    [
        ({"containers": [{"resources": {"requests": {"nvidia.com/gpu": "2"}}},
                         {"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}, 3),
        ({"containers": [{"resources": {"limits": {"nvidia.com/gpu": 2}}}],
          "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}]}, 4),
        # A sidecar (restartable init container) adds to the app containers.
        ({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}],
          "initContainers": [{"restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                             {"resources": {"limits": {"nvidia.com/gpu": "2"}}}]}, 3),
        ({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "lots"}}}]}, 0),
        ({"containers": "not a list"}, 0),
    ],
)
def test_pod_gpus(spec, gpus):
    assert ko.pod_gpus({"spec": spec}, "nvidia.com/gpu") == gpus


def test_terminal_and_unassigned_pods_hold_nothing():
    assert TRANSLATE.pod(pod("a", 8)).usage is None
    running = pod("a", 8, node="n1")
    assert TRANSLATE.pod(running).usage.gpus == 8
    running["status"]["phase"] = "Succeeded"
    assert TRANSLATE.pod(running).usage is None


def spec_of(pods: list[dict], group: dict | None = None, default_timeout: float = 60.0):
    g = TRANSLATE.group(group) if group else None
    return gangspec.build("ml/g", [TRANSLATE.pod(p) for p in pods], g, default_timeout)


def test_timeout_precedence():
    pg = {"metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 2, "scheduleTimeoutSeconds": 30}}
    spec = spec_of(gang("g", 2, 8), pg)
    assert (spec.min_member, spec.timeout_seconds) == (2, 30.0)
    spec = spec_of(gang("g", 2, 8, annotations={"railyard.io/timeout-seconds": "90",
                                                 "railyard.io/min-member": "3"}), pg)
    assert (spec.min_member, spec.timeout_seconds) == (3, 90.0)
    assert spec_of(gang("g", 1, 8)).timeout_seconds == 60.0
    assert spec_of(gang("g", 1, 8), default_timeout=5.0).timeout_seconds == 5.0


@pytest.mark.parametrize("value, problem", [
    ("1000000000000", "railyard.io/min-member must be at most 100000, got '1000000000000'"),
    ("9" * 5000, "railyard.io/min-member must be at most 100000, got '999999999999999999999999999999999999..."),
    ("\u00b2", "railyard.io/min-member must be a positive integer, got '\u00b2'"),
    ("-3", "railyard.io/min-member must be a positive integer, got '-3'"),
])
def test_sizes_are_bounded_before_anything_is_allocated(value, problem):
    spec = spec_of(gang("g", 2, 8, annotations={"railyard.io/min-member": value}))
    assert spec.invalid == (problem,) and spec.min_member == 2


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=12,
)
odd_objects = st.fixed_dictionaries(
    {},
    optional={"metadata": json_values | st.fixed_dictionaries({}, optional={
        "name": json_values, "namespace": json_values, "labels": json_values, "annotations": json_values}),
        "spec": json_values | st.fixed_dictionaries({}, optional={
            "containers": json_values, "initContainers": json_values, "tolerations": json_values,
            "nodeName": json_values, "taints": json_values, "unschedulable": json_values}),
        "status": json_values},
)


@settings(max_examples=300, deadline=None)
@given(st.lists(odd_objects, max_size=4), st.lists(odd_objects, max_size=4))
def test_odd_objects_never_crash_the_translator(nodes, pods):
    for obj in nodes:
        obj.setdefault("metadata", {})
    w = load([n for n in nodes if isinstance(n.get("metadata"), dict)], pods)
    w.plan_pending(p for p in pods)
