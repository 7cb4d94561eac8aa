"""The benchmark harness end to end (issue 5): `python -m bench run --quick` on real clusters.

Proves the harness works (every arm ran, every documented key is in results.json, the report
and plots were written), not the numbers: those are for people to read in report.md.
The pure parts (domain arithmetic, histogram quantiles, the job stream) get fast tests below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness import analysis, scenario, workload
from extender import topotext

REPO = Path(__file__).resolve().parents[2]

PER_ARM_KEYS = (
    ("throughput_pods_per_s", "avg"), ("throughput_pods_per_s", "p50"), ("throughput_pods_per_s", "p99"),
    ("gang_time_to_bind_s", "p50"), ("gang_time_to_bind_s", "p99"),
    ("narrowest_domain_fraction",), ("partial_gang_pod_seconds",), ("deadlocked_gangs",),
    ("utilization_mean",), ("fragmentation_mean",),
    ("domains_beyond_fewest_mean", "nvl"), ("domains_beyond_fewest_mean", "leaf"),
    ("fragmentation_gpu_seconds",), ("stranded_gpus_mean",),
)


def _get(doc, keys):
    for k in keys:
        assert isinstance(doc, dict) and k in doc, f"missing key {'.'.join(keys)}"
        doc = doc[k]
    return doc


@pytest.mark.e2e
def test_quick_gangs_run_writes_every_documented_key(tmp_path):
    from extender.localcluster import binaries

    if os.environ.get("CI", "").lower() != "true" and not all(
            binaries.is_cached(c) for c in (*binaries.COMPONENTS, binaries.KUEUE)):
        pytest.skip("control-plane or Kueue binaries not built yet: run `railyard cluster build --with-kueue`")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--scenario", "gangs", "--out", str(out), "--quick"],
        cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    assert set(doc["arms"]) == {"A", "B", "C", "D"}
    for arm in ("A", "B", "C", "D"):
        for keys in PER_ARM_KEYS:
            value = _get(doc["arms"][arm], keys)
            assert value is None or isinstance(value, (int, float)), (arm, keys, value)
        assert doc["arms"][arm]["pods"]["bound"] > 0, arm
        assert doc["arms"][arm]["gang_time_to_bind_s"]["p50"] is not None, arm
    for verb in ("filter", "bind"):
        assert _get(doc["arms"]["B"], ("extender_verb_ms", verb, "p50")) is not None
        _get(doc["arms"]["B"], ("extender_verb_ms", verb, "p99"))
    # The reference config scores with MostAllocated, not railyard's prioritize: never called.
    assert _get(doc["arms"]["B"], ("extender_verb_ms", "prioritize", "p50")) is None
    assert "throughput_railyard_vs_default" in doc["ratios"]
    assert doc["ratios"]["time_to_bind_p99_railyard_vs_native"] is not None
    # Arm D: Kueue admitted every gang (whole, through its TAS) and its numbers were read.
    kueue = doc["arms"]["D"]["kueue"]
    assert kueue["workloads"]["admitted"] == kueue["workloads"]["total"] > 0
    assert kueue["gang_last_member_to_admitted_s"]["p50"] is not None
    assert kueue["admission_attempt_ms"]["count"] > 0
    assert doc["arms"]["D"]["gangs"]["partly_bound"] == 0 and doc["arms"]["D"]["cpu_ms_per_pod"]["kueue"] > 0
    assert (out / "arm-D" / "workloads.json").exists() and (out / "arm-D" / "kueue-metrics.prom").exists()
    assert doc["arms"]["C"].get("kueue") is None
    report = (out / "report.md").read_text()
    assert "## Targets" in report and "| | A | B | C | D |" in report  # arms as columns
    for png in ("latency_cdf.png", "throughput.png", "utilization.png", "gang_time_to_bind.png", "gang_landing.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG", png
    # Arm B runs railyard: gangs bind whole, so no gang is left partly bound at the end.
    assert doc["arms"]["B"]["gangs"]["partly_bound"] == 0
    # Issue 23: a record per gang and arm (spans and the fewest possible), B compared with each arm.
    jobs = json.loads((out / "jobs.json").read_text())
    gangs = {j["name"] for j in jobs if j["kind"] == "gang"}
    for arm in ("A", "B", "C", "D"):
        records = doc["runs"][0]["arms"][arm]["gang_records"]
        assert set(records) == gangs, arm
        for rec in records.values():
            for key in ("spans", "fewest"):  # fewest: None when no domain of its required level held it
                assert rec.get(key) is None or set(rec[key]) == {"block", "leaf", "nvl", "host"}, (arm, rec)
    # What railyard held, from its topology view: only arm B has it, and it places B's gangs' plans.
    assert (out / "arm-B" / "holds.json.gz").exists()
    assert not any((out / f"arm-{arm}" / "holds.json.gz").exists() for arm in ("A", "C", "D"))
    on_view = doc["runs"][0]["arms"]["B"]["gang_records"]
    assert sum("fewest_on_view" in rec for rec in on_view.values()) >= len(gangs) // 2
    comparison = doc["runs"][0]["gang_comparison"]
    assert set(comparison["summary"]) == {"A", "C", "D"}
    assert "## Gang by gang" in report
    # Issue 21: one run (quick), its arms and ratios kept; process CPU, switches, attempts, load.
    assert [r["run"] for r in doc["runs"]] == [1] and doc["runs"][0]["ratios"] == doc["ratios"]
    assert doc["ratios"]["process_only_railyard_vs_default"] > 0
    for arm in ("A", "B", "C", "D"):
        a = doc["arms"][arm]
        assert a["process_cpu_ms_per_pod"] > 0 and a["cpu"]["arm"]["other_cores"] is not None, arm
        assert a["ctx_switches_per_pod"]["kube-scheduler"]["voluntary"] > 0, arm
        assert a["scheduler_attempts_per_pod"]["scheduled"] > 0, arm
    assert doc["arms"]["B"]["ctx_switches_per_pod"]["railyard"]["voluntary"] > 0
    # Gang members have a profile of their own in every arm but D: attempts per member there.
    for arm in ("A", "B", "C"):
        assert doc["arms"][arm]["scheduler_attempts_per_gang_member"]["scheduled"] > 0, arm
        assert set(doc["arms"][arm]["scheduler_attempts_by_profile"]) >= {"railyard", "default-scheduler"} - \
            ({"default-scheduler"} if arm == "B" else set()), arm
    assert doc["arms"]["D"]["scheduler_attempts_per_gang_member"] is None
    assert "## Runs" in report and "context switches/pod kube-scheduler" in report


DRAWING = topotext.parse("""
block b1
  rack r1
    nvl n1: h1 h2
    nvl n2: h3 h4
  rack r2
    nvl n1: h5 h6
""")


def test_narrowest_possible_uses_domain_paths_and_per_node_fit():
    paths = analysis.node_paths(DRAWING.nodes)
    free = {n: 8 for n in paths}
    assert analysis.narrowest_possible(paths, free, 1, 8) == 4          # one host
    assert analysis.narrowest_possible(paths, free, 2, 8) == 3          # one NVLink domain
    free.update(h2=4, h4=4)
    # r1/n1 and r1/n2 each hold one 8-GPU pod now; r2/n1 (same nvl name, other rack) holds two.
    assert analysis.narrowest_possible(paths, free, 2, 8) == 3
    free.update(h6=0)
    assert analysis.narrowest_possible(paths, free, 2, 8) == 2          # the leaf r1
    assert analysis.narrowest_possible(paths, free, 3, 8) == 1          # the block
    assert analysis.narrowest_possible(paths, free, 4, 8) == -1


def test_shared_depth():
    paths = analysis.node_paths(DRAWING.nodes)
    assert analysis.shared_depth([paths["h1"], paths["h1"]]) == 4
    assert analysis.shared_depth([paths["h1"], paths["h2"]]) == 3
    assert analysis.shared_depth([paths["h1"], paths["h3"]]) == 2
    assert analysis.shared_depth([paths["h1"], paths["h5"]]) == 1


def test_histogram_quantile_interpolates_like_prometheus():
    buckets = [(0.001, 50.0), (0.002, 100.0), (float("inf"), 100.0)]
    assert analysis.histogram_quantile(buckets, 0.5) == pytest.approx(0.001)
    assert analysis.histogram_quantile(buckets, 0.99) == pytest.approx(0.00198)
    assert analysis.histogram_quantile([], 0.5) is None


def test_every_scenario_loads_in_both_modes_and_gangs_fit_the_cluster():
    for name in scenario.names():
        for quick in (True, False):
            s = scenario.load(name, quick)
            nodes = topotext.load(s.topology_text).nodes
            jobs = workload.generate(s.workload, nodes, s.seed)
            assert jobs, name
            again = workload.generate(s.workload, nodes, s.seed)
            assert jobs == again, f"{name}: the stream is not reproducible from its seed"
            for job in jobs:
                if job.required:
                    assert job.pods <= workload.largest_domain_pods(nodes, job.required, job.gpus)


def test_two_half_bound_gangs_are_deadlocked_and_exposed():
    from bench.harness.runner import ArmResult, PodRecord

    jobs = [workload.Job("a", "gang", 2, 8, 0.0, None), workload.Job("b", "gang", 2, 8, 0.0, None)]
    pods = {
        "a-0": PodRecord("a-0", "a", 8, created=0.0, bound=1.0, node="h1"),
        "a-1": PodRecord("a-1", "a", 8, created=0.0),
        "b-0": PodRecord("b-0", "b", 8, created=0.0, bound=1.0, node="h5"),
        "b-1": PodRecord("b-1", "b", 8, created=0.0),
    }
    out, _ = analysis.analyse(ArmResult("A", pods, 100.0, 1.0), jobs, DRAWING.nodes, {"deadlock_wait_s": 30})
    assert out["deadlocked_gangs"] == 2
    assert out["partial_gang_pod_seconds"] == pytest.approx(198.0)
    assert out["gangs"] == {"total": 2, "bound_whole": 0, "partly_bound": 2, "none_bound": 0}
    assert out["gang_time_to_bind_s"] == {"p50": None, "p99": None}


def test_a_gang_bound_at_once_in_its_nvlink_domain_is_narrowest():
    from bench.harness.runner import ArmResult, PodRecord

    jobs = [workload.Job("a", "gang", 2, 8, 0.0, None)]
    pods = {f"a-{i}": PodRecord(f"a-{i}", "a", 8, created=0.0, bound=2.0, node=node)
            for i, node in enumerate(("h5", "h6"))}
    out, _ = analysis.analyse(ArmResult("B", pods, 10.0, 1.0), jobs, DRAWING.nodes, {})
    assert out["narrowest_domain_fraction"] == 1.0
    assert out["partial_gang_pod_seconds"] == 0.0
    assert out["domains_spanned_mean"] == {"block": 1.0, "leaf": 1.0, "nvl": 1.0, "host": 2.0}
    assert out["gang_time_to_bind_s"] == {"p50": 2.0, "p99": 2.0}
    # Across the two leaves' NVLink domains it would not have been.
    pods["a-1"].node = "h1"
    out, _ = analysis.analyse(ArmResult("A", pods, 10.0, 1.0), jobs, DRAWING.nodes, {})
    assert out["narrowest_domain_fraction"] == 0.0


def test_a_binding_burst_caught_half_done_by_one_sample_is_no_deadlock():
    """The `contention` quick run of issue 11: a gang waiting past deadlock_wait_s, and another
    gang whose two Bindings straddle a second; a single sample saw the second gang holding what
    the first lacked. A deadlock is a holding that persists (deadlock_hold_s in a row)."""
    from bench.harness.runner import PodRecord

    jobs = [workload.Job("c", "gang", 1, 8, 0.0, None), workload.Job("d", "gang", 2, 8, 40.0, None)]
    by_job = {
        "c": [PodRecord("c-0", "c", 8, created=0.0)],
        "d": [PodRecord("d-0", "d", 8, created=40.0, bound=50.9, node="h1"),
              PodRecord("d-1", "d", 8, created=40.0, bound=51.3, node="h2")],
    }
    assert analysis._deadlocks(jobs, by_job, wait=30, end=100, hold=1) == 1  # the old one-sample rule
    assert analysis._deadlocks(jobs, by_job, wait=30, end=100) == 0
    # The same holding kept for 10 samples and more is a deadlock.
    by_job["d"][1] = PodRecord("d-1", "d", 8, created=40.0)
    assert analysis._deadlocks(jobs, by_job, wait=30, end=100) == 1
    assert analysis._deadlocks(jobs, by_job, wait=30, end=59) == 0  # held 9 samples by then (51..59)


def test_gang_timelines_show_a_burst_caught_by_one_sample_as_a_one_second_run(tmp_path):
    import json

    from bench.harness import timeline

    (tmp_path / "jobs.json").write_text(json.dumps([
        {"name": "c", "kind": "gang", "pods": 1, "gpus": 8, "at": 0.0, "runtime_s": None, "required": "nvl",
         "preferred": None},
        {"name": "d", "kind": "gang", "pods": 2, "gpus": 8, "at": 40.0, "runtime_s": None, "required": None,
         "preferred": None}]))
    (tmp_path / "arm-B").mkdir()
    (tmp_path / "arm-B" / "pods.json").write_text(json.dumps([
        {"name": "c-0", "job": "c", "gpus": 8, "created": 0.0, "bound": None, "node": None, "finished": None},
        {"name": "d-0", "job": "d", "gpus": 8, "created": 40.0, "bound": 50.9, "node": "b1-r1-n1-h1", "finished": None},
        {"name": "d-1", "job": "d", "gpus": 8, "created": 40.0, "bound": 51.3, "node": "b1-r1-n2-h1", "finished": None}]))
    text = timeline.render(tmp_path, "B")
    assert "| c | 1 x 8 | required nvl | 0.0 | - | - | - | - | - |" in text
    assert "| d | 2 x 8 | - | 40.0 | 50.9 | 51.3 | 11.3 | - | b1-r1-n1, b1-r1-n2 |" in text
    assert text.endswith("- c: 51-51 (1 s)\n")
