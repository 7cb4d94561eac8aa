"""The preemption scenario's numbers (issue 12) from synthetic observations: victims, the
harness's own count of what was needed, wasted evictions, the report rows and targets."""

from __future__ import annotations

from bench.harness import analysis, preemption, report, scenario, workload
from bench.harness.runner import ArmResult, PodRecord
from extender import topotext

NODES = topotext.load("blocks=1 racks=1 nvl=2 nodes=2 gpus=8 scheme=topograph").nodes
N1 = ["b1-r1-n1-h1", "b1-r1-n1-h2"]
N2 = ["b1-r1-n2-h1", "b1-r1-n2-h2"]
WORKLOAD = {"priority_classes": {"low": 100, "high": 1000},
            "singles": {"count": 4, "gpus": {8: 1}, "runtime_s": None, "priority_class": "low"},
            "fixed": [{"name": "hi", "pods": 2, "gpus": 8, "at_s": 10, "required": "nvl", "priority_class": "high"}]}


def observed(deleted: list[str], landed: list[str]) -> ArmResult:
    """Single pods s0..s3 on h1, h2 of n1 and n2 from t=1; ``deleted`` (by node) go at t=11;
    the gang's two members bind on ``landed`` at t=12."""
    pods = {}
    for i, node in enumerate(N1 + N2):
        pods[f"s{i}"] = PodRecord(f"s{i}", f"s{i}", 8, created=0.5, bound=1.0, node=node,
                                  deleted=11.0 if node in deleted else None)
    for i, node in enumerate(landed):
        pods[f"hi-{i}"] = PodRecord(f"hi-{i}", "hi", 8, created=10.0, bound=12.0 + i * 0.1, node=node)
    return ArmResult("X", pods, end=20.0, cluster_up_s=1.0)


def numbers(result: ArmResult) -> dict:
    jobs = workload.generate(WORKLOAD, NODES, 1)
    out, _ = analysis.analyse(result, jobs, NODES, WORKLOAD)
    return out["preemption"]


def test_one_domain_cleared_no_more_than_needed():
    p = numbers(observed(N1, N1))
    (g,) = p["gangs"]
    assert (g["victims"], g["needed"], g["victims_outside_domain"], g["victims_off_gang_nodes"]) == (2, 2, 0, 0)
    assert g["within_required"] and g["domain_level"] == "nvl" and g["victim_domains"] == 1
    assert g["time_to_bind_s"] == 2.1


def test_scattered_victims_break_the_required_level_and_extra_ones_are_waste():
    scattered = numbers(observed([N1[0], N2[0]], [N1[0], N2[0]]))["gangs"][0]
    assert scattered["within_required"] is False and scattered["domain_level"] == "leaf"
    # Counted against the NVLink domain holding most members (a tie: the first): n2's victim.
    assert scattered["victim_domains"] == 2 and scattered["victims_outside_domain"] == 1
    wasted = numbers(observed(N1 + N2[:1], N1))
    assert (wasted["victims"], wasted["needed"], wasted["victims_outside_domain"], wasted["victims_off_gang_nodes"]) \
        == (3, 2, 1, 1)


def test_needed_uses_free_nodes_and_never_counts_equal_priority():
    # One node of n2 is free: clearing n2 needs 1 victim. With every filler at the gang's own
    # priority nothing may be removed: needed is None.
    result = observed([N2[0]], N2)
    del result.pods["s3"]
    assert numbers(result)["needed"] == 1
    same = dict(WORKLOAD, priority_classes={"low": 1000, "high": 1000})
    jobs = workload.generate(same, NODES, 1)
    assert preemption.analyse(observed([], []), jobs, same, analysis.node_paths(NODES),
                              analysis.node_capacity(NODES), analysis.LEVELS) is None


def test_report_rows_and_targets_of_arm_b():
    arms = {"A": {"preemption": numbers(observed([N1[0], N2[0]], [N1[0], N2[0]]))},
            "B": {"preemption": numbers(observed(N1, N1))}}
    goals = {t["target"]: t["met"] for t in preemption.targets(arms)}
    assert goals == {"victims evicted B vs needed (issue 12)": True,
                     "victims outside the gang's final domain B (issue 12)": True,
                     "high-priority gangs bound whole B (issue 12)": True,
                     "... within their required level B (issue 12)": True}
    text = "\n".join(preemption.markdown({"arms": arms}))
    assert "| victims outside the domain the gang finally used (wasted) | 1 | 0 |" in text
    assert "| ... within their required level | 0 | 1 |" in text
    arms["B"]["preemption"] = numbers(observed(N1 + N2[:1], N1))
    missed = {t["target"]: (t["met"], t["shortfall"]) for t in preemption.targets(arms)}
    assert missed["victims evicted B vs needed (issue 12)"] == (False, "1 more")
    assert missed["victims outside the gang's final domain B (issue 12)"] == (False, "")
    assert report.targets({}, report.ratios({})) and preemption.targets({}) == []


def test_the_scenario_names_its_priority_classes_and_preemptors():
    for quick in (True, False):
        s = scenario.load("preemption", quick)
        nodes = topotext.load(s.topology_text).nodes
        jobs = workload.generate(s.workload, nodes, s.seed)
        value = preemption.priorities(jobs, s.workload)
        singles = [j for j in jobs if j.kind == "single"]
        assert len(singles) == len(nodes) and {value[j.name] for j in singles} == {100}
        assert {value[j.name] for j in jobs if j.kind == "gang"} == {1000}
