"""Issue 13, "measure the parts": arm A100, CPU per pod, the A -> A100 -> B decomposition.

Pure parts only (fixed /proc text, synthetic samples and arm results): no cluster, no timing
assertions. The harness end to end is tests/bench/test_harness.py's e2e test.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench.harness import analysis, arms, cpu, report, run, runner, workload
from extender import topotext
from extender.localcluster import config as localconfig

# A kube-apiserver line (fields trimmed after 22) and one whose command name holds ") (".
APISERVER_STAT = ("4242 (kube-apiserver) S 1 4242 4242 0 -1 4194560 51234 0 12 0 "
                  "1234 567 0 0 20 0 14 0 9876 1646104576 89000")
ODD_STAT = "77 (a) (b c) R 1 77 77 0 -1 0 0 0 0 0 250 50 3 4 20 0 1 0 100 0 0"
PROC_STAT = ("cpu  45265 10 12577 15287 237 5 98 128 0 0\n"
             "cpu0 21506 0 5874 9337 16 0 21 62 0 0\nintr 1 2 3\n")


# ------------------------------------------------------------------ /proc parsing

def test_pid_stat_is_utime_plus_stime_counted_from_the_last_parenthesis():
    assert cpu.parse_pid_stat(APISERVER_STAT, clk_tck=100) == pytest.approx(18.01)
    # Children's time (fields 16-17: 3 and 4 here) is not the process's own.
    assert cpu.parse_pid_stat(ODD_STAT, clk_tck=100) == pytest.approx(3.0)


def test_machine_busy_time_leaves_out_idle_and_iowait():
    busy = 45265 + 10 + 12577 + 5 + 98 + 128
    assert cpu.parse_machine_stat(PROC_STAT, clk_tck=100) == pytest.approx(busy / 100)


def test_sample_reads_each_pid_names_the_extender_railyard_and_skips_the_gone(tmp_path):
    for pid, text in ((4242, APISERVER_STAT), (77, ODD_STAT)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(text)
    (tmp_path / "stat").write_text(PROC_STAT)
    got = cpu.sample({"kube-apiserver": 4242, "extender": 77, "etcd": 99999}, proc=tmp_path)
    assert got["kube-apiserver"] == pytest.approx(1801 / cpu.CLK_TCK)
    assert got["railyard"] == pytest.approx(300 / cpu.CLK_TCK)
    assert "etcd" not in got and "extender" not in got
    # This process has no stat file under the fake /proc: no harness, no machine entry.
    assert set(got) == {"kube-apiserver", "railyard"}


def test_spent_subtracts_and_other_is_what_no_sampled_process_spent():
    before = {"kube-scheduler": 1.0, "railyard": 2.0, "harness": 0.5, "machine": 100.0}
    after = {"kube-scheduler": 1.5, "railyard": 3.0, "harness": 0.6, "machine": 104.0, "new": 9.0}
    got = cpu.spent(before, after)
    assert got == pytest.approx({"kube-scheduler": 0.5, "railyard": 1.0, "harness": 0.1,
                                 "machine": 4.0, "other": 2.4})


# ------------------------------------------------------------------ arm A100

def test_a_and_a100_differ_only_in_percentage_of_nodes_to_score():
    a, a100 = arms.scheduler_config(arms.ARMS["A"]), arms.scheduler_config(arms.ARMS["A100"])
    assert "percentageOfNodesToScore" not in a
    assert a100["percentageOfNodesToScore"] == 100
    assert {k: v for k, v in a100.items() if k != "percentageOfNodesToScore"} == a
    # Both are the configuration `cluster up --no-extender` generates, bar that one key.
    generated = localconfig.scheduler_config(a["clientConnection"]["kubeconfig"], None)
    assert generated == a100
    assert "extenders" not in a
    # B and C run what `cluster up` generates: no template.
    assert arms.scheduler_config(arms.ARMS["B"]) is None
    assert arms.scheduler_config(arms.ARMS["C"]) is None


def test_aref_is_b_without_the_extender(tmp_path):
    """AREF runs B's configuration (what ``cluster up`` generates with the extender) minus the
    extender, so A -> AREF -> B splits what the profiles cost from what railyard adds."""
    from bench.harness.workload import Job

    aref = arms.scheduler_config(arms.ARMS["AREF"])
    b = localconfig.scheduler_config(Path("bound-by-cluster-up"), localconfig.EXTENDER_URL_PLACEHOLDER + "/scheduler")
    assert "extenders" in b and "extenders" not in aref
    assert aref == {k: v for k, v in b.items() if k != "extenders"}
    bound = localconfig.render_scheduler_config(aref, tmp_path / "kubeconfig", None)  # as `cluster up --no-extender`
    assert "extenders" not in bound and [p["schedulerName"] for p in bound["profiles"]] == [
        p["schedulerName"] for p in b["profiles"]]
    single = Job("s0", "single", 1, 1, 0.0, None)
    assert arms.pod(single, 0, arms.ARMS["AREF"])["spec"]["schedulerName"] == "railyard-sampled"
    assert not arms.ARMS["AREF"].extender


def test_a_percentage_override_on_an_extender_arm_keeps_the_extender_bound_to_the_cluster(tmp_path):
    arm = arms.Arm("Bx", "railyard, default percentage", extender=True, percentage_of_nodes_to_score=None)
    template = arms.scheduler_config(arm)
    assert "percentageOfNodesToScore" not in template
    bound = localconfig.render_scheduler_config(template, tmp_path / "kubeconfig", "http://127.0.0.1:1234")
    assert [e["urlPrefix"] for e in bound["extenders"]] == ["http://127.0.0.1:1234/scheduler"]
    assert bound["clientConnection"]["kubeconfig"] == str(tmp_path / "kubeconfig")


def test_b_sends_single_pods_to_the_sampled_profile_and_b100_does_not():
    from bench.harness.workload import Job

    single, gang = Job("s0", "single", 1, 1, 0.0, None), Job("g0", "gang", 2, 8, 0.0, None)
    assert arms.pod(single, 0, arms.ARMS["B"])["spec"]["schedulerName"] == "railyard-sampled"
    for name in ("A", "A100", "B100", "C", "D"):
        assert "schedulerName" not in arms.pod(single, 0, arms.ARMS[name])["spec"]
    # Gang members name the reference's profile for gangs (every node, as planned), D's the default.
    for name in ("A", "A100", "B", "B100", "C"):
        assert arms.pod(gang, 0, arms.ARMS[name])["spec"]["schedulerName"] == "railyard"
    assert "schedulerName" not in arms.pod(gang, 0, arms.ARMS["D"])["spec"]
    # The profile exists in every configuration those arms run: the stock one without the
    # extender (A's template, C's generated one), the reference's with it.
    for url in (None, "http://127.0.0.1:1/scheduler"):
        (railyard,) = [p for p in localconfig.scheduler_config(Path("k"), url)["profiles"]
                       if p["schedulerName"] == arms.GANG_PROFILE]
        assert railyard.get("percentageOfNodesToScore") is None  # the global value: 100, or A's default
    assert [p["schedulerName"] for p in arms.scheduler_config(arms.ARMS["A"])["profiles"]] == \
        ["default-scheduler", "railyard"]
    # The profile exists in the configuration B runs, with its sample of 5% of the nodes.
    generated = localconfig.scheduler_config(Path("kubeconfig"), "http://127.0.0.1:1/scheduler")
    (sampled,) = [p for p in generated["profiles"] if p["schedulerName"] == "railyard-sampled"]
    assert sampled["percentageOfNodesToScore"] == 5


def test_the_percentage_reported_is_the_single_pods_profiles(tmp_path):
    config = tmp_path / "scheduler-config.yaml"
    config.write_text(localconfig.dump_yaml(localconfig.scheduler_config(Path("k"), "http://127.0.0.1:1/scheduler")))
    assert runner._percentage(config, "railyard-sampled") == 5
    assert runner._percentage(config, None) == 100


def test_a100_is_in_the_burst_scenarios():
    from bench.harness import scenario

    for name in ("throughput", "scale"):
        for quick in (True, False):
            assert "A100" in scenario.load(name, quick).arms


@pytest.mark.parametrize(("percentage", "nodes", "expected"), [
    (None, 64, 64),        # below 100 nodes: every node, whatever the setting
    (100, 64, 64),
    (None, 400, 188),      # 50 - 400/125 = 47%
    (None, 1000, 420),     # 42%
    (None, 5000, 500),     # 10%
    (None, 20000, 1000),   # floor of 5%
    (0, 1000, 420),        # 0 is the adaptive default too
    (100, 1000, 1000),
    (100, 5000, 5000),
    (5, 1000, 100),        # never fewer than 100
])
def test_nodes_to_find_mirrors_kube_scheduler(percentage, nodes, expected):
    assert arms.nodes_to_find(percentage, nodes) == expected


# ------------------------------------------------------------------ CPU per pod

def _samples(held: bool) -> dict:
    start = {"t": 0.0, "bound": 0, "cpu": {"kube-scheduler": 1.0, "kube-apiserver": 5.0, "machine": 50.0}}
    resume = {"t": 2.0, "bound": 0, "cpu": {"kube-scheduler": 1.0, "kube-apiserver": 6.0, "machine": 54.0}}
    last = {"t": 12.0, "bound": 100, "cpu": {"kube-scheduler": 2.0, "kube-apiserver": 7.5, "machine": 74.0}}
    end = {"t": 40.0, "bound": 100, "cpu": {"kube-scheduler": 2.5, "kube-apiserver": 8.0, "machine": 90.0}}
    return {"start": start, "resume": resume if held else start, "last_bind": last, "end": end}


def test_cpu_per_pod_counts_from_resume_to_the_last_binding():
    per_pod, detail = analysis.cpu_usage(_samples(held=True), created=100)
    assert per_pod == pytest.approx({"kube-scheduler": 10.0, "kube-apiserver": 15.0, "machine": 200.0,
                                     "other": 175.0})
    s = detail["scheduling"]
    assert (s["from_s"], s["to_s"], s["pods"], s["cores_busy"]) == (2.0, 12.0, 100, 2.0)
    # The creation window is divided by the pods created; the scheduler was stopped then.
    c = detail["creating"]
    assert c["ms_per_pod"]["kube-scheduler"] == 0.0
    assert c["ms_per_pod"]["kube-apiserver"] == pytest.approx(10.0)


def test_cpu_per_pod_without_a_pause_has_no_creating_window_and_falls_back_to_end():
    samples = _samples(held=False)
    _, detail = analysis.cpu_usage(samples, created=100)
    assert detail["creating"] is None
    assert detail["scheduling"]["from_s"] == 0.0
    del samples["last_bind"]
    per_pod, detail = analysis.cpu_usage(samples, created=100)
    assert (detail["scheduling"]["to_s"], detail["scheduling"]["pods"]) == (40.0, 100)
    assert per_pod["kube-scheduler"] == pytest.approx(15.0)
    samples["end"]["bound"] = 0  # nothing bound: totals, but no per-pod figures
    per_pod, detail = analysis.cpu_usage(samples, created=100)
    assert per_pod is None and detail["scheduling"]["seconds"]["kube-scheduler"] == 1.5


def test_cpu_usage_of_a_run_without_samples_is_none():
    assert analysis.cpu_usage({}, created=10) == (None, None)


DRAWING = topotext.parse("""
block b1
  rack r1
    nvl n1: h1 h2
""")


def test_analyse_reports_cpu_percentage_nodes_to_find_and_railyard_time_per_pod():
    jobs = [workload.Job("s0", "single", 1, 1, 0.0, None), workload.Job("s1", "single", 1, 1, 0.0, None)]
    pods = {j.name: runner.PodRecord(j.name, j.name, 1, created=0.1, bound=3.0, node="h1") for j in jobs}
    metrics = "\n".join([
        "# TYPE railyard_verb_duration_seconds histogram",
        'railyard_verb_duration_seconds_bucket{verb="filter",outcome="ok",le="0.001"} 2.0',
        'railyard_verb_duration_seconds_bucket{verb="filter",outcome="ok",le="+Inf"} 2.0',
        'railyard_verb_duration_seconds_sum{verb="filter",outcome="ok"} 0.0012',
        'railyard_verb_duration_seconds_count{verb="filter",outcome="ok"} 2.0',
        ""])
    samples = {"start": {"t": 0.0, "bound": 0, "cpu": {"railyard": 1.0}},
               "last_bind": {"t": 3.0, "bound": 2, "cpu": {"railyard": 1.01}},
               "end": {"t": 4.0, "bound": 2, "cpu": {"railyard": 1.02}}}
    result = runner.ArmResult("B", pods, 4.0, 1.0, extender_metrics=metrics, cpu_samples=samples,
                              percentage_of_nodes_to_score=100, load_average_1m=[1.5, 3.0, 2.0])
    out, _ = analysis.analyse(result, jobs, DRAWING.nodes, {})
    assert out["cpu_ms_per_pod"] == {"railyard": pytest.approx(5.0)}
    assert out["percentage_of_nodes_to_score"] == 100 and out["nodes_to_find"] == 2
    assert out["extender_verb_ms_per_pod"]["filter"] == pytest.approx(0.6)
    assert out["extender_verb_ms_per_pod"]["prioritize"] == 0.0
    assert out["extender_verb_ms"]["filter"]["mean"] == pytest.approx(0.6)
    assert out["load_average_1m"] == {"min": 1.5, "max": 3.0}
    assert out["throughput_pods_per_s"]["span_s"] == 0.0


# ------------------------------------------------------------------ decomposition

def _arm(throughput: float, cpu_ms: dict, handlers: dict | None = None) -> dict:
    arm = {"throughput_pods_per_s": {"avg": throughput, "span_s": 10.0}, "cpu_ms_per_pod": cpu_ms}
    if handlers is not None:
        arm["extender_verb_ms_per_pod"] = handlers
    return arm


ARMS = {
    "A": _arm(20.0, {"kube-scheduler": 10.0, "kube-apiserver": 8.0, "etcd": 2.0, "kwok": 1.0, "other": 9.0}),
    "A100": _arm(16.0, {"kube-scheduler": 14.0, "kube-apiserver": 8.0, "etcd": 2.0, "kwok": 1.0}),
    "B": _arm(10.0, {"kube-scheduler": 18.0, "kube-apiserver": 12.0, "etcd": 3.0, "kwok": 1.0, "railyard": 30.0},
              handlers={"filter": 4.0, "prioritize": 6.0, "bind": 90.0}),
    "B100": _arm(8.0, {"kube-scheduler": 20.0, "kube-apiserver": 12.0, "etcd": 3.0, "kwok": 1.0, "railyard": 32.0},
                 handlers={"filter": 5.0, "prioritize": 0.0, "bind": 90.0}),
}


def test_decomposition_steps_from_a_through_a100_to_b():
    rows = {r["step"]: r for r in report.decomposition(ARMS)}
    assert list(rows) == ["A -> A100", "A100 -> B100", "A -> B", "A100 -> B"]
    assert rows["A100 -> B100"]["throughput_ratio"] == 0.5 and rows["A100 -> B100"]["railyard_handlers_ms_per_pod"] == 5.0
    score = rows["A -> A100"]
    assert score["throughput_ratio"] == 0.8
    assert score["wall_ms_per_pod"] == {"from": 50.0, "to": 62.5, "added": 12.5}
    assert score["cpu_ms_per_pod_added"] == {"kube-scheduler": 4.0, "kube-apiserver": 0.0, "etcd": 0.0,
                                             "kwok": 0.0, "all processes": 4.0}
    assert "railyard_handlers_ms_per_pod" not in score
    ext = rows["A100 -> B"]
    assert ext["wall_ms_per_pod"]["added"] == 37.5
    # railyard runs only in B: its whole CPU per pod is the step's; "other" is not a process of ours.
    assert ext["cpu_ms_per_pod_added"] == {"kube-scheduler": 4.0, "kube-apiserver": 4.0, "etcd": 1.0,
                                           "kwok": 0.0, "railyard": 30.0, "all processes": 39.0}
    # Filter + prioritize are on the scheduling loop's path, bind is not.
    assert ext["railyard_handlers_ms_per_pod"] == 10.0
    assert ext["round_trip_and_wait_ms_per_pod"] == 27.5
    assert rows["A -> B"]["throughput_ratio"] == 0.5


def test_decomposition_skips_steps_whose_arms_did_not_run():
    arms_run = {"A": ARMS["A"], "B": ARMS["B"], "D": {"skipped": "not run"}}
    assert [r["step"] for r in report.decomposition(arms_run)] == ["A -> B"]
    assert report.decomposition({"A": ARMS["A"]}) == []
    no_cpu = {"A": {"throughput_pods_per_s": {"avg": 20.0}}, "A100": ARMS["A100"]}
    assert report.decomposition(no_cpu)[0]["cpu_ms_per_pod_added"] is None


def test_ratios_name_each_step():
    got = report.ratios(ARMS)
    assert got["throughput_railyard_vs_default"] == 0.5
    assert got["throughput_score_all_vs_default"] == 0.8
    assert got["throughput_railyard_vs_score_all"] == 0.625
    assert got["throughput_railyard_every_node_vs_score_all"] == 0.5
    assert report.ratios({"A": ARMS["A"], "B": ARMS["B"]})["throughput_railyard_vs_score_all"] is None


def _doc(arms_: dict) -> dict:
    return {"arms": arms_, "decomposition": report.decomposition(arms_)}


def test_report_section_says_what_each_step_costs_and_flags_identical_a_and_a100():
    arms_ = {name: {**arm, "nodes_to_find": 1000 if name != "A" else 420, "percentage_of_nodes_to_score":
                    None if name == "A" else 100} for name, arm in ARMS.items()}
    text = "\n".join(report.decomposition_markdown(_doc(arms_)))
    assert "| A -> A100 | scoring every feasible node" in text
    assert "50 -> 62.5 (+12.5)" in text
    assert "railyard CPU per scheduled pod (B): **30 ms**" in text
    assert "10 ms is inside railyard's filter + prioritize handlers, +27.5 ms the rest" in text
    assert "run-to-run noise" not in text
    arms_["A"]["nodes_to_find"] = arms_["A100"]["nodes_to_find"] = 64
    assert "same 64 feasible nodes" in "\n".join(report.decomposition_markdown(_doc(arms_)))
    assert report.decomposition_markdown({"arms": {}, "decomposition": []}) == []


def test_report_section_says_when_an_arm_drained_within_a_second():
    arms_ = json.loads(json.dumps(ARMS))
    arms_["A"]["throughput_pods_per_s"]["span_s"] = 0.4
    text = "\n".join(report.decomposition_markdown(_doc(arms_)))
    assert "A bound every pod within one second" in text


def test_table_has_the_new_rows_with_arms_as_columns():
    arms_ = {name: {**arm, "percentage_of_nodes_to_score": None if name == "A" else 100,
                    "nodes_to_find": 420 if name == "A" else 1000} for name, arm in ARMS.items()}
    lines = report.table({"arms": arms_}).splitlines()
    assert lines[0] == "| | A | A100 | B | B100 |"
    assert ("| percentageOfNodesToScore (feasible nodes to find) | default (420) | 100 (1000) | 100 (1000) "
            "| 100 (1000) |") in lines
    assert "| railyard CPU ms/pod | - | - | 30 | 32 |" in lines
    assert "| kube-scheduler CPU ms/pod | 10 | 14 | 18 | 20 |" in lines


# ------------------------------------------------------------------ provenance

def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_git_state_names_the_commit_and_whether_the_tree_was_dirty(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "f.txt").write_text("1\n")
    _git(tmp_path, "add", "f.txt")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "one")
    state = run.git_state(tmp_path)
    assert len(state["commit"]) == 40 and state["dirty"] is False and state["changed"] == []
    (tmp_path / "f.txt").write_text("2\n")
    state = run.git_state(tmp_path)
    assert state["dirty"] is True and state["changed"] == ["f.txt"]
    assert run.git_state(tmp_path / "not-a-repo") == {"commit": None, "dirty": None, "changed": []}


def test_an_arm_directory_from_before_issue_13_loads_without_cpu_samples(tmp_path):
    (tmp_path / "arm.json").write_text(json.dumps({"end": 5.0, "cluster_up_s": 1.0, "create_errors": 0,
                                                   "stop_reason": "all pods bound", "notes": []}))
    (tmp_path / "pods.json").write_text("[]")
    (tmp_path / "scheduler-metrics.prom").write_text("")
    old = runner.load(tmp_path, "A")
    assert old.cpu_samples == {} and old.load_average_1m == []
    assert old.percentage_of_nodes_to_score == "unknown"
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "scheduler-config.yaml").write_text("percentageOfNodesToScore: 100\n")
    assert runner.load(tmp_path, "A").percentage_of_nodes_to_score == 100


# ------------------------------------------------------------------ the API server's writes

# The counter as kube-apiserver v1.37 exposes it (staging/src/k8s.io/apiserver/pkg/endpoints/
# metrics/metrics.go, ``requestCounter``: verb, dry_run, group, version, resource, subresource,
# scope, component, code).
_REQUESTS = """# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} %d
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} %d
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} %d
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="namespace",subresource="",verb="POST",version="v1"} %d
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} %d
# HELP apiserver_request_duration_seconds [STABLE] Response latency distribution in seconds.
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1",le="0.005"} 3
"""


def test_apiserver_writes_are_the_arms_difference_per_pod_by_verb_and_resource():
    before = _REQUESTS % (100, 10, 0, 50, 7)
    after = _REQUESTS % (300, 610, 100, 51, 900)
    w = analysis.apiserver_writes((before, after), 200)
    # Writes only (the LIST is left out), every response code counted, under 0.01 per pod left
    # out of the breakdown but not of the total.
    assert w == {"total": 4.5, "PATCH pods/status": 3.5, "POST pods/binding": 1.0}
    assert list(w) == ["total", "PATCH pods/status", "POST pods/binding"]
    assert analysis.apiserver_writes(("", after), 200) is None
    assert analysis.apiserver_writes(("# GET /metrics: HTTP 403\n", after), 200) is None
    assert report._writes({"apiserver_writes_per_pod": w}) == "4.5 (PATCH pods/status 3.5, POST pods/binding 1)"


def test_an_arms_apiserver_scrapes_are_saved_and_loaded_again(tmp_path):
    result = runner.ArmResult("B", {}, 5.0, 1.0, apiserver_metrics=(_REQUESTS % (1, 2, 3, 4, 5), _REQUESTS % (2, 3, 4, 5, 6)))
    runner.save(result, tmp_path)
    assert runner.load(tmp_path, "B").apiserver_metrics == result.apiserver_metrics
