"""Issue 21 item 1, "measure first, honestly": the arithmetic of interleaved runs, the
process-only ratio, context switches and scheduling attempts, with hand-computed numbers.

Pure parts only (fixed /proc text, synthetic samples, metrics and arm results): no cluster.
"""

from __future__ import annotations

import json
import os

import pytest

from bench.harness import analysis, cpu, report, run as run_mod, runner, runs, workload

# ------------------------------------------------------------------ the process-only ratio

# Recorded by the full throughput run at cca5426 (bench/results/issue13/throughput-full-cca5426):
# raw B/A 0.65 on a busy machine. By hand: A's processes 0.397 + 1.999 + 2.308 + 0.542 + 0.068
# = 5.314 ms/pod, B's 0.564 + 1.72 + 2.8 + 3.82 + 0.79 + 0.11 = 9.804; 5.314 / 9.804 = 0.542.
CCA_A = {"etcd": 0.397, "kube-apiserver": 1.999, "kube-scheduler": 2.308, "kwok": 0.542, "harness": 0.068,
         "machine": 9.741, "other": 4.427}
CCA_B = {"etcd": 0.564, "railyard": 1.72, "kube-apiserver": 2.8, "kube-scheduler": 3.82, "kwok": 0.79,
         "harness": 0.11, "machine": 14.914, "other": 5.11}


def _arm(throughput: float, per_pod: dict[str, float]) -> dict:
    return {"throughput_pods_per_s": {"avg": throughput}, "cpu_ms_per_pod": per_pod,
            "process_cpu_ms_per_pod": round(cpu.processes(per_pod), 3)}


def test_processes_sum_every_sampled_process_but_not_the_machine_or_other_work():
    assert cpu.processes(CCA_A) == pytest.approx(5.314)
    assert cpu.processes(CCA_B) == pytest.approx(9.804)
    assert cpu.processes({"machine": 3.0, "other": 1.0}) == 0


def test_process_only_ratio_is_a_over_b_process_cpu_beside_the_raw_throughput_ratio():
    got = report.ratios({"A": _arm(19.4, CCA_A), "B": _arm(12.61, CCA_B)})
    assert got["throughput_railyard_vs_default"] == 0.65  # 12.61 / 19.4
    assert got["process_only_railyard_vs_default"] == 0.542
    # Other work on the machine changes the raw ratio, not the process-only one.
    busier_b = {**CCA_B, "other": 40.0, "machine": 49.804}
    assert report.ratios({"A": _arm(19.4, CCA_A), "B": _arm(9.7, busier_b)})["process_only_railyard_vs_default"] == 0.542
    # A baseline without CPU samples (a directory from before issue 13): no process-only ratio.
    no_cpu = {"A": {"throughput_pods_per_s": {"avg": 20.0}}, "B": _arm(10.0, CCA_B)}
    assert report.ratios(no_cpu)["process_only_railyard_vs_default"] is None
    assert report.ratios(no_cpu)["throughput_railyard_vs_default"] == 0.5


def test_every_throughput_ratio_has_its_process_only_twin():
    arms = {"A": _arm(20.0, {"kube-scheduler": 4.0}), "A100": _arm(16.0, {"kube-scheduler": 5.0}),
            "B": _arm(10.0, {"kube-scheduler": 5.0, "railyard": 3.0}),
            "B100": _arm(8.0, {"kube-scheduler": 6.0, "railyard": 4.0})}
    got = report.ratios(arms)
    assert got["process_only_score_all_vs_default"] == 0.8          # 4 / 5
    assert got["process_only_railyard_vs_score_all"] == 0.625       # 5 / 8
    assert got["process_only_railyard_every_node_vs_score_all"] == 0.5  # 5 / 10
    assert got["throughput_railyard_every_node_vs_score_all"] == 0.5     # 8 / 16


def test_the_issue_21_targets_read_the_median_ratios_and_attempts():
    arms = {"B": {"extender_verb_ms": {"filter": {"p99": 2.5}},
                  "scheduler_attempts_per_gang_member": {"unschedulable": 3.5}},
            "C": {"scheduler_attempts_per_gang_member": {"unschedulable": 2.9}}}
    got = {t["target"]: t for t in report.targets(arms, {**report.ratios({}), "process_only_railyard_vs_default": 0.76})}
    assert got["process-only throughput B/A (issue 21)"]["met"] is False
    assert got["process-only throughput B/A (issue 21)"]["shortfall"] == "20% below"  # (0.95 - 0.76) / 0.95
    assert got["railyard filter p99 (ms; issue 21, cores not saturated)"]["shortfall"] == "1.2x the target"
    attempts = got["unschedulable attempts per gang member B vs C (issue 21)"]
    assert attempts["measured"] == [3.5, 2.9] and attempts["met"] is False
    assert attempts["shortfall"] == "0.6 more per member"


# ------------------------------------------------------------------ medians over runs

def test_the_median_of_odd_and_even_counts_and_of_runs_that_did_not_measure():
    assert runs.median([0.5, 0.7, 0.6]) == 0.6
    assert runs.median([1, 2, 3, 10]) == 2.5
    assert runs.median([0.1, 0.2]) == 0.15  # rounded: not 0.15000000000000002
    assert runs.median([None, 4.0, 2.0]) == 3.0
    assert runs.median([None, None]) is None


def test_the_median_goes_key_by_key_element_by_element_and_keeps_what_differs():
    got = runs.median([
        {"t": {"avg": 10.0, "p99": 30.0}, "stop": "all pods bound", "series": [1, 5], "n": 1},
        {"t": {"avg": 12.0, "p99": 20.0}, "stop": "all pods bound", "series": [3, 5]},
        {"t": {"avg": 11.0, "p99": 40.0}, "stop": "no binding for 30s", "series": [2, 6], "n": 3}])
    assert got == {"t": {"avg": 11.0, "p99": 30.0}, "series": [2, 5], "n": 2.0,
                   "stop": ["all pods bound", "all pods bound", "no binding for 30s"]}
    # Booleans are not numbers to average.
    assert runs.median([True, False, True]) == [True, False, True]


def test_arms_median_over_the_runs_each_arm_ran_in():
    got = runs.arms([{"A": {"x": 1.0}, "B": {"skipped": "failed: port"}},
                     {"A": {"x": 3.0}, "B": {"x": 7.0}},
                     {"A": {"x": 2.0}, "B": {"x": 9.0}, "C": {"skipped": "failed: again"}}])
    assert got == {"A": {"x": 2.0}, "B": {"x": 8.0}, "C": {"skipped": "failed: again"}}


def test_write_keeps_every_run_and_reports_the_median_run_and_the_load(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "_plots", lambda out_dir, series: [])
    monkeypatch.setattr(report.preemption, "plot", lambda *a: None)

    def arm(tput: float, sched: float, other: float) -> dict:
        a = _arm(tput, {"kube-scheduler": sched, "kube-apiserver": 2.0, "machine": sched + 2.0 + other,
                        "other": other})
        a["cpu"] = {"scheduling": {"other_cores": other / 10}, "arm": {"other_cores": other / 8}}
        a["load_average_1m"] = {"min": 1.0, "max": 2.5}
        return a

    # Process CPU per pod: A 4, 4, 5; B 8, 5, 8 -> process-only 0.5, 0.8, 0.625 (median 0.625).
    # Raw: 10/20, 9/12, 5/20 -> 0.5, 0.75, 0.25 (median 0.5). Run 3's B shared the machine.
    per_run = [(arm(20.0, 2.0, 1.0), arm(10.0, 6.0, 1.0)), (arm(12.0, 2.0, 9.0), arm(9.0, 3.0, 1.0)),
               (arm(20.0, 3.0, 0.0), arm(5.0, 6.0, 20.0))]
    meta = {"scenario": "throughput", "mode": "quick", "seed": 1, "command": "python -m bench run --runs 3",
            "date": "d", "machine": "m", "topology": {"nodes": 1, "gpus": 8, "spec": "x"},
            "workload": {"jobs": 1, "pods": 1, "gangs": 0}, "arm_titles": {"A": "a", "B": "b"}, "wall_s": 1.0}
    doc = report.write(tmp_path, meta, [
        {"meta": {"run": k, "dir": f"run-{k}", "date": f"d{k}", "load_average": {}},
         "arms": {"A": a, "B": b}, "series": {}, "skipped": {}} for k, (a, b) in enumerate(per_run, 1)])
    assert [r["ratios"]["process_only_railyard_vs_default"] for r in doc["runs"]] == [0.5, 0.8, 0.625]
    assert [r["ratios"]["throughput_railyard_vs_default"] for r in doc["runs"]] == [0.5, 0.75, 0.25]
    assert doc["ratios"]["process_only_railyard_vs_default"] == 0.625
    assert doc["ratios"]["throughput_railyard_vs_default"] == 0.5
    assert doc["arms"]["B"]["throughput_pods_per_s"]["avg"] == 9.0
    assert json.loads((tmp_path / "results.json").read_text())["runs"][2]["date"] == "d3"
    text = (tmp_path / "report.md").read_text()
    assert "## Results (median of 3 runs)" in text
    assert "| 3 | B | d3 | 5 | 8 | 2 / 2.5 | 1-2.5 |" in text
    assert "| **median** | 0.5 / 0.625 |" in text
    assert "B/A = 0.5 (0.625)" in text


# ------------------------------------------------------------------ context switches

STATUS = "Name:\tkube-scheduler\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t1520\nnonvoluntary_ctxt_switches:\t37\n"


def test_status_gives_voluntary_and_involuntary_switches():
    assert cpu.parse_switches(STATUS) == (1520, 37)
    with pytest.raises(KeyError):
        cpu.parse_switches("Name:\tx\n")


def test_switches_read_every_thread_and_name_the_extender_railyard(tmp_path):
    for pid, tid, vol, inv in ((10, 10, 5, 1), (10, 11, 100, 7), (20, 20, 3, 0)):
        (tmp_path / str(pid) / "task" / str(tid)).mkdir(parents=True)
        (tmp_path / str(pid) / "task" / str(tid) / "status").write_text(
            f"voluntary_ctxt_switches:\t{vol}\nnonvoluntary_ctxt_switches:\t{inv}\n")
    got = cpu.switches({"kube-scheduler": 10, "extender": 20, "etcd": 99}, proc=tmp_path)
    assert got["kube-scheduler"] == {"10": [5, 1], "11": [100, 7]}
    assert got["railyard"] == {"20": [3, 0]}
    assert "etcd" not in got and "harness" not in got  # this process has no task dir under the fake /proc


def test_this_process_switches_are_counted_over_all_its_threads():
    got = cpu.switches({})
    assert str(os.getpid()) in got["harness"]


def test_switched_subtracts_thread_by_thread_and_counts_a_new_thread_whole():
    before = {"kube-scheduler": {"10": [5, 1], "11": [100, 7], "12": [50, 50]}, "gone": {"1": [1, 1]}}
    after = {"kube-scheduler": {"10": [9, 1], "11": [160, 10], "13": [20, 2]}, "new": {"2": [4, 4]}}
    # 4 + 60 + 20 voluntary, 0 + 3 + 2 involuntary; thread 12 exited (its switches are lost).
    assert cpu.switched(before, after) == {"kube-scheduler": {"voluntary": 84, "involuntary": 5}}


def _samples() -> dict:
    def s(t: float, bound: int, sched: float, machine: float, vol: int, switches: bool = True) -> dict:
        out = {"t": t, "bound": bound, "cpu": {"kube-scheduler": sched, "machine": machine}}
        if switches:
            out["switches"] = {"kube-scheduler": {"1": [vol, vol // 10]}}
        return out
    return {"start": s(0.0, 0, 1.0, 50.0, 0), "resume": s(2.0, 0, 1.0, 54.0, 100),
            "last_bind": s(12.0, 100, 2.0, 74.0, 2100), "end": s(40.0, 100, 2.5, 90.0, 3000)}


def test_switches_per_pod_over_the_scheduling_window_and_other_work_in_cores():
    per_pod, detail = analysis.cpu_usage(_samples(), created=100)
    s = detail["scheduling"]
    # 2000 voluntary and 200 involuntary switches over the 100 pods bound from resume to the last binding.
    assert s["switches"]["per_pod"] == {"kube-scheduler": {"voluntary": 20.0, "involuntary": 2.0}}
    assert s["switches"]["to_s"] == 12.0
    # Machine 20 CPU-s in 10 s, the scheduler 1 of them: other work 19 CPU-s = 1.9 cores.
    assert (s["cores_busy"], s["other_cores"]) == (2.0, 1.9)
    # The whole arm: machine 40 CPU-s in 40 s, the scheduler 1.5: other 38.5 / 40 = 0.96 cores.
    assert detail["arm"]["other_cores"] == 0.96


def test_switches_end_at_the_last_read_after_a_binding_when_there_is_one():
    samples = _samples()
    del samples["last_bind"]["switches"]
    # Read 0.6 s before the last binding, 98 pods bound then: (1900 - 100) / 98 voluntary per pod.
    samples["switched"] = {"t": 11.4, "bound": 98, "cpu": {}, "switches": {"kube-scheduler": {"1": [1900, 190]}}}
    sw = analysis.cpu_usage(samples, created=100)[1]["scheduling"]["switches"]
    assert (sw["to_s"], sw["pods"]) == (11.4, 98)
    assert sw["per_pod"]["kube-scheduler"] == {"voluntary": 18.37, "involuntary": 1.84}  # 1800 / 98, 180 / 98


def test_switches_run_to_the_end_when_the_last_binding_was_not_every_pods():
    samples = _samples()
    del samples["last_bind"]["switches"]  # stopped on a stall: the last poll did not read the threads
    _, detail = analysis.cpu_usage(samples, created=100)
    sw = detail["scheduling"]["switches"]
    assert (sw["to_s"], sw["pods"]) == (40.0, 100)
    assert sw["per_pod"]["kube-scheduler"]["voluntary"] == 29.0  # (3000 - 100) / 100
    assert detail["scheduling"]["to_s"] == 12.0  # the CPU window still ends at the last binding
    del samples["start"]["switches"], samples["resume"]["switches"]  # a directory from before issue 21
    assert "switches" not in analysis.cpu_usage(samples, created=100)[1]["scheduling"]


# ------------------------------------------------------------------ scheduling attempts

def _metrics(*rows: tuple[str, str, int]) -> str:
    return "\n".join(["# TYPE scheduler_schedule_attempts_total counter",
                      *(f'scheduler_schedule_attempts_total{{profile="{p}",result="{r}"}} {n}' for p, r, n in rows), ""])


JOBS = [workload.Job("g1", "gang", 4, 8, 0.0, None), workload.Job("s1", "single", 1, 1, 0.0, None),
        workload.Job("s2", "single", 1, 1, 0.0, None)]


def _result(arm: str, metrics: str, jobs: list[workload.Job] = JOBS) -> runner.ArmResult:
    pods = {}
    for j in jobs:
        for i in range(j.pods):
            name = j.name if j.kind == "single" else f"{j.name}-{i}"
            pods[name] = runner.PodRecord(name, j.name, j.gpus, created=0.1)
    return runner.ArmResult(arm, pods, 10.0, 1.0, scheduler_metrics=metrics)


def test_attempts_per_gang_member_from_the_gang_members_own_profile():
    metrics = _metrics(("railyard", "scheduled", 4), ("railyard", "unschedulable", 30),
                       ("railyard-sampled", "scheduled", 2), ("railyard-sampled", "unschedulable", 6))
    got = analysis.attempts_per_pod(_result("B", metrics), JOBS)
    # 4 members: 4 / 4 scheduled, 30 / 4 unschedulable; 6 pods: 6 / 6 and 36 / 6.
    assert got["scheduler_attempts_per_gang_member"] == {"scheduled": 1.0, "unschedulable": 7.5, "error": 0.0}
    assert got["scheduler_attempts_per_pod"] == {"scheduled": 1.0, "unschedulable": 6.0, "error": 0.0}
    assert got["scheduler_attempts_by_profile"]["railyard-sampled"] == {"scheduled": 2, "unschedulable": 6}
    # C's single pods are on default-scheduler, its members on railyard: 9 / 4 unschedulable.
    metrics = _metrics(("railyard", "scheduled", 4), ("railyard", "unschedulable", 9),
                       ("default-scheduler", "scheduled", 2))
    got = analysis.attempts_per_pod(_result("C", metrics), JOBS)["scheduler_attempts_per_gang_member"]
    assert got == {"scheduled": 1.0, "unschedulable": 2.25, "error": 0.0}


def test_attempts_per_gang_member_are_unknown_where_singles_share_the_profile():
    metrics = _metrics(("default-scheduler", "scheduled", 6), ("default-scheduler", "unschedulable", 9))
    got = analysis.attempts_per_pod(_result("D", metrics), JOBS)
    assert got["scheduler_attempts_per_gang_member"] is None
    assert got["scheduler_attempts_per_pod"] == {"scheduled": 1.0, "unschedulable": 1.5, "error": 0.0}
    # Without single pods every attempt is a gang member's, whatever the arm.
    got = analysis.attempts_per_pod(_result("D", metrics, JOBS[:1]), JOBS[:1])
    assert got["scheduler_attempts_per_gang_member"] == {"scheduled": 1.5, "unschedulable": 2.25, "error": 0.0}
    # No gang at all (throughput): nothing per member.
    assert analysis.attempts_per_pod(_result("A", metrics, JOBS[1:]), JOBS[1:])["scheduler_attempts_per_gang_member"] is None


def test_the_table_shows_switches_attempts_and_the_load():
    arm = {"ctx_switches_per_pod": {"railyard": {"voluntary": 12.5, "involuntary": 0.4}},
           "scheduler_attempts_per_gang_member": {"scheduled": 1.0, "unschedulable": 7.5, "error": 0.0},
           "cpu": {"scheduling": {"other_cores": 0.3}, "arm": {"other_cores": 0.5}}, "process_cpu_ms_per_pod": 9.8}
    lines = report.table({"arms": {"B": arm}}).splitlines()
    assert "| context switches/pod railyard (voluntary / involuntary) | 12.5 / 0.4 |" in lines
    assert "| context switches/pod kube-scheduler (voluntary / involuntary) | - |" in lines
    assert "| scheduler attempts per gang member (scheduled / unschedulable) | 1 / 7.5 |" in lines
    assert "| other work in cores: scheduling window | 0.3 |" in lines
    assert "| all processes above CPU ms/pod (process-only) | 9.8 |" in lines


def test_zero_runs_is_refused_before_anything_is_made(tmp_path, capsys):
    import argparse

    args = argparse.Namespace(scenario="throughput", quick=True, arms=None, runs=0, out=str(tmp_path / "o"),
                              kubernetes_version=None)
    assert run_mod.main(args, ["python", "-m", "bench"]) == 2
    assert "--runs must be at least 1, not 0" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_an_unpinned_kubernetes_version_is_refused_before_anything_is_made(tmp_path, capsys):
    import argparse

    args = argparse.Namespace(scenario="gangs", quick=True, arms="B,C", runs=1, out=str(tmp_path / "o"),
                              kubernetes_version="1.30.0")
    assert run_mod.main(args, ["python", "-m", "bench"]) == 2
    assert "1.30.0" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _arm_dir(path, bound: float) -> None:
    path.mkdir(parents=True)
    (path / "arm.json").write_text(json.dumps({"end": 5.0, "cluster_up_s": 1.0, "create_errors": 0,
                                               "stop_reason": "all pods bound", "notes": []}))
    (path / "pods.json").write_text(json.dumps([{"name": "s0", "job": "s0", "gpus": 1, "created": 0.1,
                                                 "bound": bound, "node": "h1"}]))
    (path / "scheduler-metrics.prom").write_text("")


@pytest.mark.parametrize("layout", ["before issue 21", "two runs"])
def test_report_again_reads_a_single_run_directory_and_one_of_several_runs(tmp_path, monkeypatch, layout):
    monkeypatch.setattr(report, "_plots", lambda out_dir, series: [])
    meta = {"scenario": "throughput", "mode": "quick", "seed": 11, "command": "c", "date": "d", "machine": "m",
            "topology": {"nodes": 64, "gpus": 512, "spec": "x"}, "workload": {"jobs": 1, "pods": 1, "gangs": 0},
            "arm_titles": {"A": "a"}, "wall_s": 1.0}
    (tmp_path / "jobs.json").write_text(json.dumps([{"name": "s0", "kind": "single", "pods": 1, "gpus": 1,
                                                     "at": 0.0, "runtime_s": None}]))
    if layout == "before issue 21":
        (tmp_path / "run.json").write_text(json.dumps({"scenario": "throughput", "quick": True, "meta": meta,
                                                       "skipped": {}}))
        _arm_dir(tmp_path / "arm-A", 2.0)
    else:
        runs_ = [{"meta": {"run": k, "dir": f"run-{k}", "date": f"d{k}", "load_average": {}}, "skipped": {}}
                 for k in (1, 2)]
        (tmp_path / "run.json").write_text(json.dumps({"scenario": "throughput", "quick": True, "meta": meta,
                                                       "runs": runs_}))
        _arm_dir(tmp_path / "run-1" / "arm-A", 2.0)
        _arm_dir(tmp_path / "run-2" / "arm-A", 4.0)
    assert run_mod.rereport(tmp_path) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [r["dir"] for r in doc["runs"]] == (["."] if layout == "before issue 21" else ["run-1", "run-2"])
    # created 0.1, bound 2.0 and 4.0: pod create->bind 1.9 and 3.9 s, median 2.9.
    assert doc["arms"]["A"]["pod_time_to_bind_s"]["p50"] == (1.9 if layout == "before issue 21" else 2.9)
