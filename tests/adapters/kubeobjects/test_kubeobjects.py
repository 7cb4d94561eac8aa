"""The translator: label presets, node and pod facts, gang precedence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from extender import topotext
from extender.adapters import kubeobjects as ko
from extender.adapters.kubeobjects.resources import node_allocatable
from extender.core.gangs import gangspec
from extender.core.model import FABRIC_LEVEL
from tests.topologies import TRANSLATE, Cluster, gang, pod


def facts(nodes: list[dict]) -> list:
    return [TRANSLATE.node(n) for n in nodes]


def load(nodes: list[dict], pods: list[dict] = ()) -> Cluster:
    nodes = facts(nodes)
    return Cluster.load(nodes, ko.detect_levels(nodes), [TRANSLATE.pod(p) for p in pods])

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "labels"
T = "network.topology.nvidia.com/"
V1 = "fabric.topograph.run/tier-"
OCI = "oci.oraclecloud.com/rdma."
REQ = "railyard.io/required-topology"

# The switch tree of Topograph's labeler_test.go TestApplyNodeLabelsWithBlock (every tag), written
# out from the test's data: IB2 > S1 > {S2: 104-106, S3: 201, 202, 205}; IB1 > S4 > {S5: 301-303, S6: 401-403}.
SPINE_S1 = {"Node104", "Node105", "Node106", "Node201", "Node202", "Node205"}
BLOCKS = [{"Node104", "Node105", "Node106"}, {"Node201", "Node202", "Node205"},
          {"Node301", "Node302", "Node303"}, {"Node401", "Node402", "Node403"}]
TREE = {"Node201", "Node202", "Node205", "Node304", "Node305", "Node306"}
"""TestApplyNodeLabelsWithTree: S1 > {S2: 201, 202, 205; xf946c4acef2d5939: 304-306}."""
BUSY_401 = [pod("busy", 2, node="Node401")]
"""Two GPUs in use on Node401: spine S4 no longer holds six whole nodes, so S1 is the only answer."""


def documented(scheme: str, cluster: str, gpus: int = 8) -> list[dict]:
    """Node objects from tests/fixtures/labels/<scheme>.yaml (a documented example of that label
    scheme, cited in the file), each with ``gpus`` GPUs."""
    entries = yaml.safe_load((FIXTURES / f"{scheme}.yaml").read_text())[cluster]
    return [{"metadata": {"name": e["name"], "labels": dict(e["labels"])},
             "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "pods": "110"}}} for e in entries]


def keys(choice) -> list[str]:
    return [lvl.key for lvl in choice.levels]


@pytest.mark.parametrize(
    "scheme, cluster, gpus, levels, size, required, busy, where",  # where: the domains that may hold it
    [
        # Topograph v0.1.0: block is the tier next to the nodes, under spine, under datacenter.
        ("topograph-v0.1", "with-block", 8, [T + "datacenter", T + "spine", T + "block", T + "accelerator"],
         6, T + "spine", BUSY_401, [SPINE_S1]),
        ("topograph-v0.1", "with-block", 8, [T + "datacenter", T + "spine", T + "block", T + "accelerator"],
         3, T + "block", BUSY_401, BLOCKS[:3]),  # the fourth block lost Node401
        ("topograph-v0.1", "with-tree", 8, [T + "spine", T + "block"], 6, T + "spine", [], [TREE]),
        # Topograph v0.3.0-v0.5.0: leaf < spine < core.
        ("topograph-v0.5", "with-block", 8, [T + "core", T + "spine", T + "leaf", T + "accelerator"],
         6, T + "spine", BUSY_401, [SPINE_S1]),
        ("topograph-v0.5", "with-block", 8, [T + "core", T + "spine", T + "leaf", T + "accelerator"],
         3, T + "leaf", BUSY_401, BLOCKS[:3]),
        ("topograph-v0.5", "with-tree", 8, [T + "spine", T + "leaf"], 6, T + "spine", [], [TREE]),
        # Topograph v1.0.0: tier-0 is closest to the node; three tiers, then two.
        ("topograph-v1.0", "three-tiers", 8, [V1 + "2", V1 + "1", V1 + "0", "accelerator.topograph.run/domain"],
         6, V1 + "1", BUSY_401, [SPINE_S1]),
        ("topograph-v1.0", "two-tiers", 8, [V1 + "1", V1 + "0"], 6, V1 + "1", [], [TREE]),
        # GB200 NVL72, 4 GPUs a tray: rack A is split into two 9-tray partitions, so 12 trays of one
        # partition exist only in rack B.
        ("clique", "gb200-two-racks", 4, [ko.CLIQUE_CLUSTER, ko.CLIQUE],
         12, ko.CLIQUE, [], [{f"rack-b-tray-{t:02d}" for t in range(18)}]),
        ("gke", "one-block", 8, ["cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
                                 "cloud.google.com/gce-topology-host"],
         5, "cloud.google.com/gce-topology-subblock", [], [{f"gke-a3u-pool-{i}" for i in range(4, 9)}]),
        # The EC2 topology diagram: instances 1-3 share layer-2 node NN2, 1 and 2 share layer-3 NN4.
        ("eks", "ec2-diagram", 8, [f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3)],
         3, "topology.k8s.aws/network-node-layer-2", [], [{"instance-1", "instance-2", "instance-3"}]),
        ("eks", "ec2-diagram", 8, [f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3)],
         2, "topology.k8s.aws/network-node-layer-3", [], [{"instance-1", "instance-2"}]),
        ("oci", "superclusters", 8, [OCI + "hpc_island_id", OCI + "network_block_id", OCI + "local_block_id"],
         4, OCI + "network_block_id", [],
         [{"oke-example-1", "oke-node-2", "oke-node-3", "oke-node-4"}]),
        ("oci-host", "two-racks", 8, ["oci.oraclecloud.com/host.network_block_id", "oci.oraclecloud.com/host.rack_id"],
         2, "oci.oraclecloud.com/host.rack_id", [], [{"oci-host-1", "oci-host-2"}]),
    ],
)
def test_documented_labels_give_the_documented_order_and_place_there(scheme, cluster, gpus, levels, size,
                                                                      required, busy, where):
    nodes = documented(scheme, cluster, gpus)
    choice = ko.detect_levels(facts(nodes))
    assert keys(choice) == levels
    assert choice.problems == ()
    (a,) = load(nodes, busy).plan_pending(gang("g", size, gpus, annotations={REQ: required}))
    assert a.feasible, a.reason
    assert levels.index(a.level) >= levels.index(required)  # the narrowest level that holds it
    placed = set(a.placement.values())
    assert len(placed) == size and any(placed <= domain for domain in where)


def test_the_old_topograph_order_splits_the_spine_and_refuses_the_gang():
    # The order railyard had before (block broader than spine) on Topograph's own v0.1.0 labels: each
    # spine is cut per block, so six nodes under spine S1 are never one domain.
    nodes = documented("topograph-v0.1", "with-block")
    old = ko.explicit_levels([T + "datacenter", T + "block", T + "spine", T + "accelerator"])
    w = Cluster.load(facts(nodes), old, [TRANSLATE.pod(p) for p in BUSY_401])
    (a,) = w.plan_pending(gang("g", 6, 8, annotations={REQ: T + "spine"}))
    assert not a.feasible
    assert re.fullmatch(rf"gang ml/g needs 6 pods x 8 GPUs within one {T}spine; best spine IB./S./S. fits 3",
                        a.reason)


def test_doc_examples_and_the_v1_sub_domain():
    for scheme, levels in [
        ("topograph-v0.1", [T + "datacenter", T + "spine", T + "block", T + "accelerator"]),
        ("topograph-v0.5", [T + "core", T + "spine", T + "leaf", T + "accelerator"]),
        ("topograph-v1.0", [V1 + "2", V1 + "1", V1 + "0", "accelerator.topograph.run/domain",
                            "accelerator.topograph.run/sub-domain"]),
    ]:
        assert keys(ko.detect_levels(facts(documented(scheme, "doc-example")))) == levels


def test_topograph_v1_mixed_depth_never_merges_across_tier_numbers():
    # Topograph counts tiers from the node, so the shared root is tier-1 on node-1 and tier-2 on
    # node-2. Two depths are two fabrics, each on its own tree: the two nodes share no domain
    # (never a false one), and a gang never spans them.
    nodes = documented("topograph-v1.0", "mixed-depth")
    w = load(nodes)
    assert [(lvl.key, lvl.fabric) for lvl in w.state.levels] == [
        (FABRIC_LEVEL, ""), (V1 + "1", "topograph-v1-2-tiers"), (V1 + "0", "topograph-v1-2-tiers"),
        (V1 + "2", "topograph-v1-3-tiers"), (V1 + "1", "topograph-v1-3-tiers"), (V1 + "0", "topograph-v1-3-tiers")]
    (a,) = w.plan_pending(gang("g", 2, 8, annotations={REQ: V1 + "1"}))
    assert not a.feasible
    assert a.reason.endswith("best tier-1 topograph-v1-2-tiers/shared-root fits 1")
    (a,) = w.plan_pending(gang("h", 2, 8))
    assert a.reason.endswith(f"within one {FABRIC_LEVEL}; best fabric topograph-v1-2-tiers fits 1")


def test_topograph_v1_tiers_any_depth_highest_first():
    # "There is no fixed maximum depth" (Topograph v1.0.0 docs/reference/node-labels.md).
    nodes = topotext.load("scheme topograph-v1\ntier-3 a\n  tier-2 b\n    tier-1 c\n      tier-0 d\n"
                          "        nvl x: h1 h2\n").nodes
    assert keys(ko.detect_levels(facts(nodes))) == [V1 + "3", V1 + "2", V1 + "1", V1 + "0",
                                                    "accelerator.topograph.run/domain"]


def upgraded(old: list[dict], new: list[dict]) -> list[dict]:
    """The nodes after an upgrade: Topograph adds the new labels and leaves the old ones."""
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in old}
    for n in new:
        n["metadata"]["labels"] = {**labels[n["metadata"]["name"]], **n["metadata"]["labels"]}
    return new


def test_v1_labels_win_over_pre_v1_labels_left_on_the_same_node():
    # Topograph v1.0.0 (pkg/engines/k8s/kubernetes.go isManagedLevelLabel) never removes
    # network.topology.nvidia.com/*: an upgraded node carries both schemes.
    nodes = upgraded(documented("topograph-v0.5", "with-block"), documented("topograph-v1.0", "three-tiers"))
    choice = ko.detect_levels(facts(nodes))
    assert choice.preset == "topograph-v1"
    assert keys(choice) == [V1 + "2", V1 + "1", V1 + "0", "accelerator.topograph.run/domain"]
    assert choice.problems == (
        "12 node(s) also carry pre-v1 Topograph (network.topology.nvidia.com/*) labels (e.g. Node104); "
        "ignored there: the newer Topograph labels are current",)
    (a,) = load(nodes, BUSY_401).plan_pending(gang("g", 6, 8, annotations={REQ: V1 + "1"}))
    assert set(a.placement.values()) == SPINE_S1


def test_v0_5_labels_win_over_v0_1_labels_left_on_the_same_node():
    # v0.3.0-v0.5.0 merge labels in (pkg/engines/k8s/kubernetes.go MergeNodeLabels, maps.Copy).
    nodes = upgraded(documented("topograph-v0.1", "with-block"), documented("topograph-v0.5", "with-block"))
    choice = ko.detect_levels(facts(nodes))
    assert (choice.preset, keys(choice)) == ("topograph", [T + "core", T + "spine", T + "leaf", T + "accelerator"])
    assert choice.problems == (
        "12 node(s) also carry Topograph v0.1 (network.topology.nvidia.com/block, datacenter) labels "
        "(e.g. Node104); ignored there: the newer Topograph labels are current",)


def test_nodes_with_only_the_keys_both_pre_v1_schemes_share_join_either():
    # A provider that reports only NVLink blocks gets only .../accelerator (labeler.go
    # getBlockNodeLabels); such nodes fit v0.1 and v0.5 alike and are not reported.
    nodes = documented("topograph-v0.1", "with-block")
    for n in nodes[9:]:
        n["metadata"]["labels"] = {T + "accelerator": n["metadata"]["labels"][T + "accelerator"]}
    choice = ko.detect_levels(facts(nodes))
    assert (choice.preset, choice.problems) == ("topograph-v0.1", ())
    assert keys(choice) == [T + "datacenter", T + "spine", T + "block", T + "accelerator"]


def test_clique_keys_on_the_full_value():
    # Clique id 1 exists in both racks: 9 trays in rack A, 18 in rack B, never 27 in one domain.
    w = load(documented("clique", "gb200-two-racks", gpus=4))
    assert [lvl.key for lvl in w.state.levels] == [ko.CLIQUE_CLUSTER, ko.CLIQUE]
    (a,) = w.plan_pending(gang("g", 19, 4, annotations={REQ: ko.CLIQUE}))
    assert not a.feasible
    assert ("best nvlink 0f4c1d2e-9b8a-4c7d-a6e5-3b2c1d0e9f8a/0f4c1d2e-9b8a-4c7d-a6e5-3b2c1d0e9f8a.1 fits 18"
            in a.reason)


def test_clique_adds_the_nvlink_levels_under_a_switch_tree():
    nodes = documented("eks", "ec2-diagram", gpus=4)
    # A P6e-GB200-like mix: GPU Feature Discovery adds the clique beside the EKS layers.
    racks = ["7b968a6d-c8aa-45e1-9e07-e1e51be99c31"] * 3 + ["0f4c1d2e-9b8a-4c7d-a6e5-3b2c1d0e9f8a"]
    for n, rack in zip(nodes, racks):
        n["metadata"]["labels"][ko.CLIQUE] = f"{rack}.1"
    choice = ko.detect_levels(facts(nodes))
    assert keys(choice) == [f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3)] + [
        ko.CLIQUE_CLUSTER, ko.CLIQUE]
    assert choice.problems == ()


def test_oci_no_imds_placeholder_is_no_domain():
    # With no RDMA locality in the instance metadata the OCI labeler writes "no-imds-data" on every
    # node: that must not make them one local block.
    nodes = documented("oci", "no-imds")
    choice = ko.detect_levels(facts(nodes))
    assert keys(choice) == [OCI + "hpc_island_id", OCI + "network_block_id", OCI + "local_block_id"]
    assert choice.problems == (
        "2 node(s) carry no-imds-data (e.g. oke-no-imds-1) at oci.oraclecloud.com/rdma.hpc_island_id, "
        "oci.oraclecloud.com/rdma.network_block_id, oci.oraclecloud.com/rdma.local_block_id: "
        "its labeler knows no domain there; each such node is a domain of its own",)
    (a,) = load(nodes).plan_pending(gang("g", 2, 8, annotations={REQ: "local-block"}))
    assert a.reason == ("gang ml/g needs 2 pods x 8 GPUs within one oci.oraclecloud.com/rdma.local_block_id; "
                        "best local-block -/-/- fits 1")


def test_two_presets_on_one_cluster_are_two_fabrics():
    nodes = documented("topograph-v0.5", "with-block") + documented("gke", "one-block")
    choice = ko.detect_levels(facts(nodes))
    assert choice.preset == "fabrics"
    assert [(lvl.name, lvl.fabric) for lvl in choice.levels] == [
        ("fabric", ""), ("core", "topograph"), ("spine", "topograph"), ("leaf", "topograph"),
        ("nvlink", "topograph"), ("block", "gke"), ("subblock", "gke"), ("gce-host", "gke")]
    assert choice.problems == ("2 fabrics, each planned on its own tree; a gang never spans two: "
                               "topograph (12 node(s), e.g. Node104), gke (8 node(s), e.g. gke-a3u-pool-1)",)
    # The pools' own levels, by name: only Topograph has a leaf, only GKE a sub-block.
    w = load(nodes)
    (leaf,) = w.plan_pending(gang("a", 3, 8, annotations={REQ: "leaf"}))
    (sub,) = w.plan_pending(gang("b", 5, 8, annotations={REQ: "subblock"}))
    assert leaf.domain[0] == "topograph" and sub.domain[0] == "gke"
    assert {n.startswith("Node") for n in leaf.placement.values()} == {True}
    assert {n.startswith("gke-") for n in sub.placement.values()} == {True}


def test_clique_beside_topograph_accelerator_is_ignored_and_said():
    nodes = documented("topograph-v0.5", "with-block")
    nodes[0]["metadata"]["labels"][ko.CLIQUE] = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1"
    choice = ko.detect_levels(facts(nodes))
    assert ko.CLIQUE not in keys(choice)
    assert choice.problems == ("nvidia.com/gpu.clique ignored: topograph already names the NVLink domain",)


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


# Issue 25 item 4: one rule for every container kind. The API server refuses a fraction of an
# extended resource (or of pods) in any container's requests or limits and in the overhead, and
# a negative value of anything (ValidateResourceQuantityValue, pkg/apis/core/validation, which
# validateOverhead reuses); cpu and memory may be fractions. Each kind below carries the odd
# value beside a main container asking 8 GPUs.
KINDS = {
    "init": lambda v: {"initContainers": [{"name": "warm", "resources": {"requests": v}}]},
    "sidecar": lambda v: {"initContainers": [{"name": "log", "restartPolicy": "Always", "resources": {"limits": v}}]},
    "main": lambda v: {"containers": [{"name": "aux", "resources": {"requests": v}}]},
    "overhead": lambda v: {"overhead": v},
}
WHERE = {"init": "init container warm", "sidecar": "init container log", "main": "container aux",
         "overhead": "overhead"}


def with_odd(kind: str, resource: str, value: object) -> dict:
    p = pod("p", 8)
    extra = KINDS[kind]({resource: value})
    for field, more in extra.items():
        p["spec"][field] = p["spec"].get(field, []) + more if isinstance(more, list) else more
    return p


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("resource, value, got", [
    ("nvidia.com/gpu", "500m", "'500m' (0.5)"),
    ("nvidia.com/gpu", 1.5, "1.5"),
    ("nvidia.com/gpu", "0.1n", "'0.1n' (0.000000001)"),
    ("example.com/nic", "250m", "'250m' (0.25)"),
    ("pods", "1.5", "'1.5'"),
])
def test_a_fraction_of_an_integer_resource_is_a_problem_in_every_container_kind(kind, resource, value, got):
    facts = TRANSLATE.pod(with_odd(kind, resource, value))
    assert facts.problems == (f"{WHERE[kind]} {resource} must be a whole number, got {got}",)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("resource, value, problem", [
    ("nvidia.com/gpu", "-1", "must not be negative, got '-1'"),
    ("memory", -8, "must not be negative, got -8"),
    ("cpu", "abc", "quantity 'abc' is not a number with an optional suffix "
                   "(n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or e<exponent>)"),
])
def test_a_negative_or_unreadable_value_is_a_problem_in_every_container_kind(kind, resource, value, problem):
    sep = ": " if problem.startswith("quantity") else " "
    assert TRANSLATE.pod(with_odd(kind, resource, value)).problems == (f"{WHERE[kind]} {resource}{sep}{problem}",)


@pytest.mark.parametrize("kind", KINDS)
def test_fractions_of_cpu_and_memory_are_read_in_every_container_kind(kind):
    # Rounded up after the sum, as kube-scheduler's NodeResourcesFit reads the pod's requests
    # (MilliValue for cpu, Value for the rest): 0.5m cpu is 1 millicore, 500m bytes 1 byte.
    facts = TRANSLATE.pod(with_odd(kind, "cpu", "0.5m"))
    assert facts.problems == () and facts.gpus == 8 and dict(facts.eligibility.requests)["cpu"] == 1
    facts = TRANSLATE.pod(with_odd(kind, "memory", "500m"))
    assert facts.problems == () and dict(facts.eligibility.requests)["memory"] == 1


def test_a_limit_beside_the_request_read_is_held_to_the_same_rule():
    p = pod("p", 8)
    p["spec"]["initContainers"] = [{"name": "warm", "resources": {"requests": {"nvidia.com/gpu": "1"},
                                                                  "limits": {"nvidia.com/gpu": "1500m"}}}]
    assert TRANSLATE.pod(p).problems == ("init container warm nvidia.com/gpu limit must be a whole number, "
                                         "got '1500m' (1.5)",)


def test_a_node_with_a_fraction_of_an_integer_resource_has_none_of_it():
    node = {"metadata": {"name": "n"}, "status": {"allocatable": {
        "nvidia.com/gpu": "7500m", "example.com/nic": "1.5", "cpu": "1500m", "memory": "0.5"}}}
    assert node_allocatable(node, "nvidia.com/gpu") == (0, (("cpu", 1500), ("memory", 1)))


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


# -- what railyard writes on pods --------------------------------------------------------------

# k8s.io/apimachinery/pkg/util/validation IsQualifiedName: the name part of an annotation key.
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def _address(levels):
    from extender.core.model import Address, Place
    return Address("ml/p", "h1", 3, 1, tuple(Place(lvl.key, lvl.name or lvl.key.rsplit("/", 1)[-1], f"d{i}")
                                            for i, lvl in enumerate(levels)))


@pytest.mark.parametrize("preset", sorted(ko.PRESETS))
def test_the_address_annotations_of_every_preset_are_valid_distinct_keys(preset):
    from extender.adapters.kubeobjects import notes
    levels = ko.PRESETS[preset]
    written = notes.address_annotations(_address(levels))
    assert written["railyard.io/rank"] == "3" and written["railyard.io/slice"] == "1"
    domains = {k: v for k, v in written.items() if k.startswith("railyard.io/domain.")}
    assert sorted(domains.values()) == sorted(f"d{i}" for i in range(len(levels)))  # one key per level
    for key in written:
        prefix, name = key.split("/")
        assert prefix == "railyard.io" and len(name) <= 63 and QUALIFIED_NAME.match(name), key


def test_address_annotation_names_are_made_valid_and_told_apart():
    from extender.adapters.kubeobjects import notes
    from extender.core.model import Address, Place
    address = Address("ml/p", "h1", None, None, (
        Place("example.com/zone", "zone", "z1"), Place("other.io/zone", "zone", "z1/a"),
        Place("example.com/odd", "-odd name:" + "x" * 80 + ".", "z1/a/b")))
    written = notes.address_annotations(address)
    assert list(written) == ["railyard.io/domain.zone", "railyard.io/domain.zone-1", "railyard.io/domain." + "x" * 56]
    assert "railyard.io/rank" not in written and "railyard.io/slice" not in written  # a replacement round


@pytest.mark.parametrize("raw, read", [
    ("0,1,2,3", ("0", "1", "2", "3")),
    ("rail-a", ("rail-a",)),
    ("", ()),
    ("0,,1", ()),
    ("x" * 64, ()),
    (",".join(["1"] * 65), ()),
    ("1" * 5000, ()),
])
def test_the_rails_railyard_told_a_member_are_read_back_only_in_their_shape(raw, read):
    from extender.adapters.kubeobjects import notes
    assert notes.told_rails({"railyard.io/rails": raw}) == read
    pod = {"metadata": {"name": "p", "namespace": "ml", "annotations": {
        "railyard.io/rails": raw, "railyard.io/binding": '{"round":"r","node":"h1","size":1}'}}, "spec": {}}
    assert ko.pod_facts(pod, "nvidia.com/gpu").told_rails == read
