"""Arm D (issue 15, item 3): how a job becomes Kueue objects, the Workload watch, Kueue's numbers.

Pure parts only; the arm on a real cluster is tests/bench/test_harness.py's e2e test. Label and
annotation names are Kueue v0.17.0's (``pkg/controller/jobs/pod/constants/constants.go``,
``apis/kueue/v1beta2/topology_types.go``, ``pkg/controller/constants``), written out here
rather than taken from the harness, so a typo there fails.
"""

from __future__ import annotations

import pytest

from bench.harness import analysis, arms, kueue, report, runner, workload
from extender import topotext

DRAWING = topotext.parse("""
block b1
  rack r1
    nvl n1: h1 h2
    nvl n2: h3[2/8]
""")
LEAF = "network.topology.nvidia.com/leaf"


def test_a_gang_member_in_arm_d_is_a_ranked_kueue_pod_group_member_with_its_level():
    gang = workload.Job("g7", "gang", 4, 8, 0.0, 60.0, required="leaf")
    pod = arms.pod(gang, 2, arms.ARMS["D"])
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels["kueue.x-k8s.io/queue-name"] == "bench"
    assert labels["kueue.x-k8s.io/pod-group-name"] == "g7"
    assert labels["kueue.x-k8s.io/pod-group-pod-index"] == "2"
    assert annotations["kueue.x-k8s.io/pod-group-total-count"] == "4"
    assert annotations["kueue.x-k8s.io/podset-required-topology"] == LEAF
    assert "kueue.x-k8s.io/podset-preferred-topology" not in annotations
    preferred = arms.pod(workload.Job("g8", "gang", 2, 4, 0.0, None, preferred="nvl"), 0, arms.ARMS["D"])
    assert preferred["metadata"]["annotations"]["kueue.x-k8s.io/podset-preferred-topology"] == \
        "network.topology.nvidia.com/accelerator"
    unasked = arms.pod(workload.Job("g9", "gang", 2, 4, 0.0, None), 0, arms.ARMS["D"])["metadata"]["annotations"]
    assert not {k for k in unasked if k.startswith("kueue.x-k8s.io/podset-")}
    # The rest of the pod is what every arm gets, but the gang members' profile (A's: arms.GANG_PROFILE).
    same = arms.pod(gang, 2, arms.ARMS["A"])
    assert same["spec"].pop("schedulerName") == arms.GANG_PROFILE
    assert pod["spec"] == same["spec"] and pod["metadata"]["name"] == same["metadata"]["name"]


def test_a_single_pod_in_arm_d_only_names_the_queue_and_other_arms_carry_nothing_of_kueue():
    single = workload.Job("s3", "single", 1, 2, 0.0, 30.0)
    labels = arms.pod(single, 0, arms.ARMS["D"])["metadata"]["labels"]
    assert labels == {"bench.railyard.io/job": "s3", "kueue.x-k8s.io/queue-name": "bench"}
    gang = workload.Job("g7", "gang", 4, 8, 0.0, 60.0, required="leaf")
    for name in ("A", "A100", "B", "C"):
        meta = arms.pod(gang, 0, arms.ARMS[name])["metadata"]
        assert not [k for k in (*meta["labels"], *meta["annotations"]) if k.startswith("kueue.x-k8s.io/")], name
        assert arms.kueue_objects(arms.ARMS[name], DRAWING.nodes) == []


def test_arm_d_gets_a_topology_down_to_the_host_a_tas_flavor_and_all_gpus_as_quota():
    objects = {obj["kind"]: (path, obj) for path, obj in arms.kueue_objects(arms.ARMS["D"], DRAWING.nodes)}
    assert list(objects) == ["Topology", "ResourceFlavor", "ClusterQueue", "LocalQueue"]
    topology = objects["Topology"][1]
    assert [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]] == [
        "network.topology.nvidia.com/spine", LEAF, "network.topology.nvidia.com/accelerator", "kubernetes.io/hostname"]
    flavor = objects["ResourceFlavor"][1]["spec"]
    assert flavor["topologyName"] == topology["metadata"]["name"]
    # Kueue requires a nodeLabel on a TAS flavor; every node must carry it or TAS skips the node.
    for node in DRAWING.nodes:
        assert flavor["nodeLabels"].items() <= node["metadata"]["labels"].items(), node["metadata"]["name"]
    (group,) = objects["ClusterQueue"][1]["spec"]["resourceGroups"]
    (quota,) = group["flavors"][0]["resources"]
    assert quota == {"name": "nvidia.com/gpu", "nominalQuota": 24}  # 3 nodes x 8 GPUs, in use or not
    path, local = objects["LocalQueue"]
    assert path == "/apis/kueue.x-k8s.io/v1beta2/namespaces/bench/localqueues"
    assert local["spec"]["clusterQueue"] == objects["ClusterQueue"][1]["metadata"]["name"]
    assert all(p.startswith("/apis/kueue.x-k8s.io/v1beta2/") for p, _ in objects.values())


def _workload(name, owners, *conditions):
    return {"metadata": {"name": name, "ownerReferences": [{"kind": "Pod", "name": o} for o in owners]},
            "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


def test_the_workload_watch_stamps_each_condition_once_and_skips_workloads_of_other_pods(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(kueue.time, "monotonic", lambda: clock[0])
    watch = kueue.WorkloadWatcher(kube=None, job_of_pod={"g1-0": "g1", "g1-1": "g1", "s0": "s0"}, t0=[90.0])
    watch.handle(_workload("g1", ["g1-0", "g1-1"]))
    clock[0] = 101.5
    watch.handle(_workload("g1", ["g1-0", "g1-1"], "QuotaReserved", "Admitted"))
    clock[0] = 130.0
    watch.handle(_workload("g1", ["g1-0", "g1-1"], "QuotaReserved", "Admitted", "Finished"))
    watch.handle(_workload("pod-s0-1a2b3", ["s0"]))
    watch.handle(_workload("stranger", ["someone-else"], "Admitted"))
    g1 = watch.records["g1"]
    assert (g1.job, g1.created, g1.quota_reserved, g1.admitted, g1.finished) == ("g1", 10.0, 11.5, 11.5, 40.0)
    assert watch.records["pod-s0-1a2b3"].job == "s0" and watch.records["pod-s0-1a2b3"].admitted is None
    assert "stranger" not in watch.records


KUEUE_METRICS = "\n".join([
    "# TYPE kueue_admission_attempt_duration_seconds histogram",
    'kueue_admission_attempt_duration_seconds_bucket{replica_role="standalone",result="success",le="0.005"} 3',
    'kueue_admission_attempt_duration_seconds_bucket{replica_role="standalone",result="success",le="+Inf"} 3',
    'kueue_admission_attempt_duration_seconds_sum{replica_role="standalone",result="success"} 0.006',
    'kueue_admission_attempt_duration_seconds_count{replica_role="standalone",result="success"} 3',
    'kueue_admission_attempt_duration_seconds_bucket{replica_role="standalone",result="inadmissible",le="0.005"} 0',
    'kueue_admission_attempt_duration_seconds_bucket{replica_role="standalone",result="inadmissible",le="+Inf"} 1',
    'kueue_admission_attempt_duration_seconds_sum{replica_role="standalone",result="inadmissible"} 0.018',
    'kueue_admission_attempt_duration_seconds_count{replica_role="standalone",result="inadmissible"} 1',
    "# TYPE kueue_admission_attempts_total counter",
    'kueue_admission_attempts_total{replica_role="standalone",result="success"} 3',
    'kueue_admission_attempts_total{replica_role="standalone",result="inadmissible"} 1',
    ""])


def _gang_run():
    jobs = [workload.Job("g1", "gang", 2, 8, 0.0, None), workload.Job("g2", "gang", 1, 8, 0.0, None)]
    pods = {
        "g1-0": runner.PodRecord("g1-0", "g1", 8, created=1.0, bound=4.0, node="h1"),
        "g1-1": runner.PodRecord("g1-1", "g1", 8, created=1.5, bound=4.5, node="h2"),
        "g2-0": runner.PodRecord("g2-0", "g2", 8, created=2.0),  # never admitted
    }
    workloads = {"g1": kueue.WorkloadRecord("g1", "g1", created=1.6, quota_reserved=3.0, admitted=3.0),
                 "g2": kueue.WorkloadRecord("g2", "g2", created=2.1)}
    return jobs, runner.ArmResult("D", pods, 10.0, 1.0, workloads=workloads, kueue_metrics=KUEUE_METRICS)


def test_kueue_numbers_split_a_gangs_wait_at_admission_and_read_kueues_histograms():
    jobs, result = _gang_run()
    out, _ = analysis.analyse(result, jobs, DRAWING.nodes, {})
    k = out["kueue"]
    assert k["workloads"] == {"total": 2, "admitted": 1}
    assert k["gang_created_to_admitted_s"] == {"p50": 2.0, "p99": 2.0}      # 1.0 -> 3.0
    assert k["gang_last_member_to_admitted_s"] == {"p50": 1.5, "p99": 1.5}  # 1.5 -> 3.0
    assert k["gang_admitted_to_bound_s"] == {"p50": 1.5, "p99": 1.5}        # 3.0 -> 4.5
    assert k["admission_attempts"] == {"inadmissible": 1, "success": 3}
    assert k["admission_attempt_ms"]["count"] == 4 and k["admission_attempt_ms"]["mean"] == pytest.approx(6.0)
    lines = report.table({"arms": {"D": out}}).splitlines()
    assert "| Kueue: gang first member created -> admitted p50 / p99 s | 2.0 / 2.0 |" in lines
    assert "| Kueue: admission attempts success / inadmissible | 3 / 1 |" in lines
    # p99 falls in the +Inf bucket: its lower bound, 5 ms, as histogram_quantile answers.
    assert "| Kueue: admission attempt mean / p99 ms (its scheduler, TAS included) | 6.0 / 5.0 |" in lines


def test_an_arm_without_kueue_has_no_kueue_numbers_and_shows_dashes():
    jobs, result = _gang_run()
    result.workloads, result.kueue_metrics = {}, ""
    out, _ = analysis.analyse(result, jobs, DRAWING.nodes, {})
    assert out["kueue"] is None
    assert "| Kueue: gang admitted -> last member bound p50 / p99 s | - |" in report.table({"arms": {"A": out}}).splitlines()


def test_a_kueue_arm_directory_round_trips(tmp_path):
    _, result = _gang_run()
    result.scheduler_metrics = "# nothing\n"
    runner.save(result, tmp_path)
    again = runner.load(tmp_path, "D")
    assert again.workloads == result.workloads and again.kueue_metrics == KUEUE_METRICS
    assert runner.load(tmp_path, "D").pods == result.pods
