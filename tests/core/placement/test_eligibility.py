"""Eligibility as kube-scheduler decides it (issue 10): tables over drawn topologies, each row
the nodes a human worked out from the drawing, and the reasons with their numbers."""

from __future__ import annotations

import pytest

from extender.core.placement.eligibility import requirement_holds, term_matches
from extender.core.model import NodeFacts, Requirement, SelectorTerm
from tests.topologies import cluster, gang, pod

NVL = "network.topology.nvidia.com/accelerator"
HOST = "kubernetes.io/hostname"

# Two pools: the H100 NVLink domain n2 holds a 4 x 8 gang exactly (the tightest fit), the A100
# nodes sit in n1 (5 nodes, one spare).
TWO_POOLS = """
block b1
  rack r1
    nvl n1: a1[8 label=pool=a100] a2[8 label=pool=a100] a3[8 label=pool=a100] a4[8 label=pool=a100] a5[8 label=pool=a100]
    nvl n2: h1[8 label=pool=h100] h2[8 label=pool=h100] h3[8 label=pool=h100] h4[8 label=pool=h100]
  rack r2
    nvl n3: c1[0 label=pool=cpu] c2[0 label=pool=cpu]
"""


def placed(drawing, pending, **kw):
    (a,) = cluster(drawing, **kw).plan_pending(pending)
    assert a.feasible, a.reason
    return a


def selector(pool):
    return {"nodeSelector": {"pool": pool}}


def affinity(*terms, preferred=()):
    na = {}
    if terms:
        na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": list(terms)}
    if preferred:
        na["preferredDuringSchedulingIgnoredDuringExecution"] = list(preferred)
    return {"affinity": {"nodeAffinity": na}}


def expr(key, op, *values):
    return {"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}


@pytest.mark.parametrize("spec, nodes", [
    # No constraint: the exact fit, the H100 domain.
    ({}, {"h1", "h2", "h3", "h4"}),
    # nodeSelector: the A100 pool, although the H100 pool fits tighter.
    (selector("a100"), {"a1", "a2", "a3", "a4"}),
    # Required affinity, every operator a pool label can use.
    (affinity(expr("pool", "In", "a100")), {"a1", "a2", "a3", "a4"}),
    (affinity(expr("pool", "NotIn", "h100", "cpu")), {"a1", "a2", "a3", "a4"}),
    (affinity(expr("pool", "In", "x"), expr("pool", "In", "a100")), {"a1", "a2", "a3", "a4"}),  # terms are ORed
    # matchFields metadata.name: exactly these nodes.
    (affinity({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a2", "a3", "a4", "a5"]}]}),
     {"a2", "a3", "a4", "a5"}),
])
def test_a_gang_goes_only_where_its_pods_may_run(spec, nodes):
    a = placed(TWO_POOLS, gang("g", 4, 8, **spec))
    assert set(a.placement.values()) == nodes


def test_gt_lt_and_exists_read_the_label_as_an_integer():
    drawing = "rack r1\n  nvl n1: x1[8 label=gen=3] x2[8 label=gen=4]\n  nvl n2: y1[8 label=gen=5] y2[8]\n"
    assert placed(drawing, gang("g", 1, 8, **affinity(expr("gen", "Gt", "4")))).placement == {"ml/g-0": "y1"}
    assert placed(drawing, gang("g", 1, 8, **affinity(expr("gen", "Lt", "4")))).placement == {"ml/g-0": "x1"}
    assert placed(drawing, gang("g", 1, 8, **affinity(expr("gen", "DoesNotExist")))).placement == {"ml/g-0": "y2"}
    two = placed(drawing, gang("g", 2, 8, **affinity(expr("gen", "Exists"))))
    assert set(two.placement.values()) == {"x1", "x2"}  # one NVLink domain with the label on both


def test_operators_against_their_definitions():
    labels = {"gen": "5", "pool": "a"}
    assert requirement_holds(Requirement("gen", "Gt", ("4",)), labels)
    assert not requirement_holds(Requirement("gen", "Gt", ("5",)), labels)
    assert not requirement_holds(Requirement("pool", "Gt", ("1",)), labels)  # not an integer: no match
    assert not requirement_holds(Requirement("gen", "Gt", ("4", "6")), labels)  # Gt takes one value
    assert requirement_holds(Requirement("zone", "NotIn", ("x",)), labels)  # a missing label is NotIn
    assert not requirement_holds(Requirement("zone", "In", ("x",)), labels)
    assert not requirement_holds(Requirement("pool", "Bogus", ("a",)), labels)
    node = NodeFacts("n1", labels)
    assert not term_matches(SelectorTerm(), node)  # an empty term matches nothing
    assert term_matches(SelectorTerm(fields=(Requirement("metadata.name", "NotIn", ("n2",)),)), node)


def test_no_node_matches_the_selector_and_the_reason_says_how_many():
    (a,) = cluster(TWO_POOLS).plan_pending(gang("g", 2, 8, **selector("b200")))
    assert not a.feasible
    assert a.reason == ("gang ml/g needs 2 pods x 8 GPUs; the cluster fits 0 (11 nodes not matching the pods' "
                        "node selector or affinity)")


# n2 is the exact fit for 4 x 8 GPUs, but CPU-only pods take its CPU.
CPU_TAKEN = """
rack r1
  nvl n1: a1 a2 a3 a4 a5
  nvl n2: h1 h2 h3 h4
"""


def cpu_pod(name, node, cpu):
    p = pod(name, 0, node=node)
    p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    return p


def with_cpu(pods, cpu):
    for p in pods:
        p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    return pods


def test_cpu_taken_by_cpu_only_pods_moves_the_gang():
    busy = [cpu_pod(f"etl-{n}", n, "120") for n in ("h1", "h2")]  # 128 cpu each: 8 left
    a = placed(CPU_TAKEN, with_cpu(gang("g", 4, 8), "16"), pods=busy)
    assert set(a.placement.values()) == {"a1", "a2", "a3", "a4"}
    # Without the CPU request the exact fit wins again.
    assert set(placed(CPU_TAKEN, gang("g", 4, 8), pods=busy).placement.values()) == {"h1", "h2", "h3", "h4"}


def test_the_reason_counts_the_nodes_short_of_a_resource():
    busy = [cpu_pod(f"etl-{n}", n, "120") for n in ("a1", "a2", "h1", "h2")]
    required = {"railyard.io/required-topology": "nvlink"}
    (a,) = cluster(CPU_TAKEN, pods=busy).plan_pending(with_cpu(gang("g", 4, 8, annotations=required), "16"))
    assert not a.feasible  # n1 holds 3 (a1, a2 lack cpu), n2 holds 2
    assert a.reason == ("gang ml/g needs 4 pods x 8 GPUs within one network.topology.nvidia.com/accelerator; "
                        "best nvlink r1/n1 fits 3 (2 nodes short of cpu)")


def test_init_containers_sidecars_and_overhead_count_for_cpu_as_kubernetes_counts_them():
    # 100 cpu app + 20 cpu sidecar = 120; an init container of 110 + the sidecar started before
    # it = 130 > 120; plus 1 cpu overhead: 131 > 128, so no node holds the pod.
    p = pod("big", 8, labels={"scheduling.x-k8s.io/pod-group": "g"},
            initContainers=[{"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "20"}}},
                            {"name": "warm", "resources": {"requests": {"cpu": "110"}}}],
            overhead={"cpu": "1"})
    p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "100"}
    (a,) = cluster(CPU_TAKEN).plan_pending([p])
    assert not a.feasible and "9 nodes short of cpu" in a.reason
    p["spec"]["overhead"] = {}
    p["spec"]["initContainers"][1]["resources"]["requests"]["cpu"] = "100"  # 120 peak: fits
    (b,) = cluster(CPU_TAKEN).plan_pending([p])
    assert b.feasible


def test_a_cpu_launcher_gets_its_own_eligibility():
    workers = gang("w", 4, 8, labels={"scheduling.x-k8s.io/pod-group": "job"})
    launcher = pod("launcher", 0, labels={"scheduling.x-k8s.io/pod-group": "job"}, **selector("cpu"))
    a = placed(TWO_POOLS, workers + [launcher])
    assert a.placement["ml/launcher"] in {"c1", "c2"}
    assert {a.placement[f"ml/w-{i}"] for i in range(4)} == {"h1", "h2", "h3", "h4"}
    # A launcher that may run on the workers' node rides with rank 0, as before.
    b = placed(TWO_POOLS, gang("w", 4, 8, labels={"scheduling.x-k8s.io/pod-group": "job"})
               + [pod("l", 0, labels={"scheduling.x-k8s.io/pod-group": "job"})])
    assert b.placement["ml/l"] == b.placement["ml/w-0"]


def test_preferred_affinity_breaks_a_tie():
    drawing = "rack r1\n  nvl n1: x1[8 label=zone=a] x2[8 label=zone=a]\n  nvl n2: y1[8 label=zone=b] y2[8 label=zone=b]\n"
    prefer_b = affinity(preferred=[{"weight": 10, "preference": expr("zone", "In", "b")}])
    assert set(placed(drawing, gang("g", 2, 8)).placement.values()) == {"x1", "x2"}
    assert set(placed(drawing, gang("g", 2, 8, **prefer_b)).placement.values()) == {"y1", "y2"}
    assert placed(drawing, gang("g", 1, 8, **prefer_b)).placement == {"ml/g-0": "y1"}


@pytest.mark.parametrize("spec, problem", [
    ({"containers": [{"name": "m", "resources": {"requests": {"nvidia.com/gpu": "500m"}}}]},
     "container m nvidia.com/gpu must be a whole number, got '500m' (0.5)"),
    ({"containers": [{"name": "m", "resources": {"requests": {"cpu": "lots"}}}]},
     "container m cpu: quantity 'lots' is not a number with an optional suffix"),
    ({"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "-8"}}}]},
     "container m nvidia.com/gpu must not be negative, got '-8'"),
    ({"containers": [{"name": "m"}], **affinity(expr("pool", "Near", "a"))},
     "operator must be one of DoesNotExist, Exists, Gt, In, Lt, NotIn, got 'Near'"),
])
def test_unreadable_pod_values_are_the_gangs_reason(spec, problem):
    p = pod("p", 8, labels={"scheduling.x-k8s.io/pod-group": "g"})
    p["spec"] = spec
    (a,) = cluster(TWO_POOLS).plan_pending([p])
    assert not a.feasible and problem in a.reason and a.reason.startswith("gang ml/g: pod ml/p: ")
