"""Warm restart (issue 20 item 4): a new instance of a workload (a restart attempt: a new gang,
the same ``lineage``) is planned back into the domain its last instance was bound in, when it
fits there, rather than into the best fit; never merged with the old instance."""

from __future__ import annotations

from dataclasses import replace

from extender.core.gangs import warm
from tests.service.test_live import bind_async, create, extender
from tests.topologies import TRANSLATE, gang

# n1 holds a 2 x 8 gang exactly (the best fit); n2 has a node more.
DRAWING = """
block b1
  rack r1
    nvl n1: h1[8/8] h2[8/8]
  rack r2
    nvl n2: h3[8/8] h4[8/8] h5[8/8]
"""
NODES = ["h1", "h2", "h3", "h4", "h5"]


def attempt(n: int, lineage: str = "ml/job"):
    """The pods of restart attempt ``n``: a gang of its own (``ml/job-<n>``), one lineage."""
    out = []
    for raw in gang(f"job-{n}", 2, 8, annotations={"railyard.io/min-member": "2"}):
        facts = TRANSLATE.pod(raw)
        out.append(replace(facts, gang=replace(facts.gang, lineage=lineage)))
    return out


def run(ext, pods, names=NODES):
    """Create, filter and bind the gang; the watch then shows it running. Returns (plan, the
    gang's reason when planned)."""
    create(ext, pods)
    plan = {}
    for p in pods:
        (plan[p.key],) = ext.filter(p, names).node_names
    reason = next(g.reason for g in ext.debug_gangs() if g.gang == pods[0].gang.key)
    errors = {}
    for t in [bind_async(ext, {"metadata": {"name": p.name, "uid": p.uid}}, plan[p.key], errors) for p in pods]:
        t.join(5)
    assert errors == {}
    for p in pods:
        ext.pod_upserted(replace(p, node=plan[p.key], phase="Running"))
    return plan, reason


def finish(ext, pods, plan):
    for p in pods:
        ext.pod_deleted(replace(p, node=plan[p.key], phase="Failed"))


def test_a_restart_attempt_goes_back_to_its_last_domain_not_to_the_best_fit():
    ext, _, _ = extender(DRAWING)
    first = attempt(0)
    plan, _ = run(ext, first, names=["h3", "h4", "h5"])  # n1 was busy then (refused by kube-scheduler)
    assert set(plan.values()) <= {"h3", "h4", "h5"}
    finish(ext, first, plan)
    again, reason = run(ext, attempt(1))
    assert set(again.values()) <= {"h3", "h4", "h5"}  # n2 again, though n1 fits best
    assert reason.endswith("; back in nvlink b1/r2/n2, where the last instance of ml/job was bound (warm restart)")
    other, reason = run(ext, attempt(0, lineage="ml/other"))  # another workload: the best fit
    assert set(other.values()) == {"h1", "h2"} and "warm restart" not in reason


def test_a_restart_attempt_that_no_longer_fits_its_last_domain_goes_to_the_best_fit():
    ext, _, _ = extender(DRAWING)
    plan, _ = run(ext, attempt(0), names=["h3", "h4", "h5"])
    # The old attempt still runs on n2 (never merged with the new one): n2 has one node left.
    again, reason = run(ext, attempt(1))
    assert set(again.values()) == {"h1", "h2"} and "warm restart" not in reason


def test_the_last_domain_is_forgotten_after_warm_seconds(monkeypatch):
    ext, _, clock = extender(DRAWING)
    first = attempt(0)
    plan, _ = run(ext, first, names=["h3", "h4", "h5"])
    finish(ext, first, plan)
    clock.now += warm.WARM_SECONDS + 1
    again, reason = run(ext, attempt(1))
    assert set(again.values()) == {"h1", "h2"} and "warm restart" not in reason


def test_at_most_warm_lineages_workloads_are_remembered(monkeypatch):
    monkeypatch.setattr(warm, "WARM_LINEAGES", 1)
    ext, _, _ = extender(DRAWING)
    first = attempt(0)
    plan, _ = run(ext, first, names=["h3", "h4", "h5"])
    finish(ext, first, plan)
    run(ext, attempt(0, lineage="ml/other"))  # remembered after ml/job: ml/job is forgotten
    again, reason = run(ext, attempt(1))
    assert set(again.values()) <= {"h3", "h4", "h5"}  # n1 is taken by ml/other now, not warm
    assert "warm restart" not in reason
