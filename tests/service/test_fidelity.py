"""The live extender against kube-scheduler's own verdicts, and replacements staying home
(issue 10, items 2 and 4)."""

from __future__ import annotations

from tests.service.test_live import bind_async, create, extender
from tests.topologies import gang

# Two NVLink domains of three nodes each under one rack.
TWO_NVL = """
block b1
  rack r1
    nvl nvl-a: a1 a2 a3
    nvl nvl-b: b1 b2 b3 b4 b5 b6
"""
NAMES = ["a1", "a2", "a3", "b1", "b2", "b3", "b4", "b5", "b6"]
REQUIRED = {"railyard.io/required-topology": "nvlink", "railyard.io/min-member": "3"}


def test_nodes_the_scheduler_left_out_of_the_filter_call_are_not_planned():
    ext, _, _ = extender(TWO_NVL)
    pods = gang("g", 3, 8, annotations=REQUIRED)
    create(ext, pods)
    # kube-scheduler's filters passed only b4..b6 for this pod (say a host port is taken elsewhere).
    v = ext.filter(pods[0], ["b4", "b5", "b6"])
    assert v.node_names == ("b4",)
    assert set(ext.debug_gangs()[0].plan.values()) == {"b4", "b5", "b6"}


def test_a_refused_planned_node_is_left_out_and_the_gang_planned_again_at_once():
    ext, _, _ = extender(TWO_NVL)
    pods = gang("g", 3, 8, annotations=REQUIRED)
    create(ext, pods)
    assert ext.filter(pods[0], NAMES).node_names == ("a1",)  # nvl-a: the exact fit
    first = ext.debug_gangs()[0].plan
    assert set(first.values()) == {"a1", "a2", "a3"}
    # The second member's filter call does not carry a2: the scheduler refused it.
    v = ext.filter(pods[1], [n for n in NAMES if n != "a2"])
    assert len(v.node_names) == 1 and v.node_names[0].startswith("b")
    again = ext.debug_gangs()[0]
    assert again.phase == "planned" and set(again.plan.values()) <= {"b1", "b2", "b3", "b4", "b5", "b6"}
    # The first member, asked again, now goes to its new node in nvl-b.
    assert ext.filter(pods[0], NAMES).node_names[0].startswith("b")


def test_refused_everywhere_the_reason_names_the_refused_nodes():
    ext, _, _ = extender(TWO_NVL)
    pods = gang("g", 3, 8, annotations=REQUIRED)
    create(ext, pods)
    ext.filter(pods[0], NAMES)
    v = ext.filter(pods[1], ["a1", "a3"])  # a2 refused, and nothing of nvl-b passes either
    assert v.node_names == ()
    reason = v.failed["a1"]
    assert reason == ("gang ml/g needs 3 pods x 8 GPUs within one network.topology.nvidia.com/accelerator; "
                      "best nvlink b1/r1/nvl-a fits 2 (1 node refused by kube-scheduler's filters)")
    assert ext.ctx.state.reservations() == {}


def run_gang(ext, pods, names=NAMES):
    create(ext, pods)
    plan = {p["metadata"]["name"]: ext.filter(p, names).node_names[0] for p in pods}
    errors = {}
    for t in [bind_async(ext, p, plan[p["metadata"]["name"]], errors) for p in pods]:
        t.join(5)
    assert errors == {}
    for p in pods:  # the watch shows them bound and running
        p["spec"]["nodeName"] = plan[p["metadata"]["name"]]
        p["status"]["phase"] = "Running"
        ext.pod_upserted(p)
    return plan


def test_a_replacement_stays_in_its_gangs_nvlink_domain():
    # The reproduction: a 4-pod gang with required nvlink runs in nvl-b with two spare
    # nodes there; a member is deleted and recreated by its controller: the new pod must go to
    # nvl-b, never to nvl-a (which fits a single pod tighter).
    ext, binder, _ = extender(TWO_NVL)
    annotations = {"railyard.io/required-topology": "nvlink", "railyard.io/min-member": "4"}
    pods = gang("g", 4, 8, annotations=annotations)
    plan = run_gang(ext, pods)
    assert set(plan.values()) <= {f"b{i}" for i in range(1, 7)}
    ext.pod_deleted(pods[3])
    (again,) = gang("g", 1, 8, annotations=annotations, start=3)
    again["metadata"]["uid"] = "uid-again"
    create(ext, [again])
    v = ext.filter(again, NAMES)
    assert len(v.node_names) == 1 and v.node_names[0] in {f"b{i}" for i in range(1, 7)} - set(plan.values()) | {plan["g-3"]}
    assert ext.debug_gangs()[0].reason.endswith("; kept beside its running members in nvlink b1/r1/nvl-b")


def test_a_replacement_whose_home_is_full_waits_with_numbers():
    ext, _, _ = extender(TWO_NVL)
    annotations = {"railyard.io/required-topology": "nvlink", "railyard.io/min-member": "3"}
    pods = gang("g", 3, 8, annotations=annotations)
    plan = run_gang(ext, pods)
    assert set(plan.values()) == {"a1", "a2", "a3"}
    ext.pod_deleted(pods[2])
    # Another gang takes the freed node meanwhile.
    other = gang("o", 1, 8)
    run_gang(ext, other, names=["a3"])
    (again,) = gang("g", 1, 8, annotations=annotations, start=2)
    again["metadata"]["uid"] = "uid-again"
    create(ext, [again])
    v = ext.filter(again, NAMES)
    assert v.node_names == ()
    assert v.failed["b1"] == ("gang ml/g needs 1 pod x 8 GPUs within nvlink b1/r1/nvl-a, where its running "
                              "members are; that domain fits 0 (24 GPUs in use)")


def test_a_replacement_without_a_required_level_goes_nearest_first():
    ext, _, _ = extender(TWO_NVL)
    pods = gang("g", 2, 8, annotations={"railyard.io/min-member": "2"})
    plan = run_gang(ext, pods)
    assert set(plan.values()) == {"a1", "a2"}  # nvl-a, best fit
    ext.pod_deleted(pods[1])
    (again,) = gang("g", 1, 8, annotations={"railyard.io/min-member": "2"}, start=1)
    again["metadata"]["uid"] = "uid-again"
    create(ext, [again])
    # Best fit alone would pick any free node; nearest first keeps it in nvl-a (a2 or a3).
    assert ext.filter(again, NAMES).node_names[0] in {"a2", "a3"}


def test_a_label_added_after_the_topology_was_built_is_seen_by_node_selectors():
    from tests.topologies import TRANSLATE

    ext, _, _ = extender(TWO_NVL)
    ext.ctx.state.view()  # the tree is built before the label arrives
    for name in ("b4", "b5", "b6"):
        n = ext.ctx.state.node(name)
        ext.node_upserted(TRANSLATE.node({
            "metadata": {"name": name, "labels": {**n.labels, "team": "late"}},
            "status": {"allocatable": {"nvidia.com/gpu": str(n.gpus), **dict(n.allocatable)}}}))
    pods = gang("g", 3, 8, annotations=REQUIRED, nodeSelector={"team": "late"})
    create(ext, pods)
    assert ext.filter(pods[0], NAMES).node_names == ("b4",)
    assert set(ext.debug_gangs()[0].plan.values()) == {"b4", "b5", "b6"}
