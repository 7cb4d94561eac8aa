"""Gangs found from the workload that made the pods (adapters/kubeobjects/workloads.py).

Every pod here carries exactly the keys its controller writes, taken from that project's source:

- JobSet v0.12.0 ``pkg/controllers/jobset_controller.go`` ``labelAndAnnotateObject`` (each key as
  label and annotation; exclusive-topology and node-selector as annotations only) plus the Job
  controller's ``batch.kubernetes.io/job-name``/``controller-uid`` labels and the completion
  index label and annotation (kubernetes v1.37.2 ``pkg/controller/job/indexed_job_utils.go``).
- LeaderWorkerSet v0.9.0 ``pkg/controllers/leaderworkerset_controller.go`` (leader template:
  ``name``, ``worker-index: "0"``, annotation ``size``, ``exclusive-topology`` when set on the
  LWS), ``pkg/controllers/pod_controller.go`` ``constructWorkerStatefulSetApplyConfiguration``
  (workers: ``group-index``, ``name``, ``group-key``, ``leader-name``), ``pkg/webhooks/
  pod_webhook.go`` (``group-index``, ``group-key`` = sha1 of ``<ns>/<leader>``, ``worker-index``).
- Kubeflow training-operator v1.9.4 ``pkg/controller.v1/common/pod.go`` (``GenLabels``,
  replica type and index, ``job-role: master``) and ``pkg/controller.v1/control/
  podgroup_control.go`` (scheduler-plugins label / Volcano annotation = the job's name),
  ``pkg/controller.v1/common/job.go`` (PodGroup ``minMember`` = every replica).
- Kubeflow Trainer v2.3.0 ``pkg/runtime/framework/plugins/coscheduling/coscheduling.go`` (the
  PodGroup named after the TrainJob, owned by it, ``minMember`` counting initializers).
"""

from __future__ import annotations

import hashlib

import pytest

from extender.adapters import kubeobjects as ko
from extender.adapters.k8s.watch_cache import GROUPS, resources_for
from extender.adapters.kubeobjects.groups import SCHEDULER_PLUGINS, VOLCANO
from extender.adapters.kubeobjects.workloads import JOBS, JOBSETS, KINDS, LEADERWORKERSETS, TRAINJOBS
from extender.core.gangs import gangspec
from extender.core.model import LEAD_SIZE, MIN_MEMBER
from extender.service.whatif import origin
from extender.settings import DEFAULT_GPU_RESOURCE, WorkloadSettings

T = ko.Translator(DEFAULT_GPU_RESOURCE)


def gpu_pod(name: str, ns: str, labels: dict, annotations: dict, gpus: int = 8) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def jobset_pods(name: str, rjobs: list[tuple[str, int, int]], attempt: int = 0, ns: str = "ml",
                set_annotations: dict | None = None, extra_labels: dict | None = None) -> list[dict]:
    """The pods a JobSet's Jobs make: ``rjobs`` is (replicatedJob, replicas, pods per Job)."""
    out, global_index = [], 0
    total_jobs = sum(r for _, r, _ in rjobs)
    for rj, replicas, per_job in rjobs:
        for job_index in range(replicas):
            job = f"{name}-{rj}-{job_index}"
            keys = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/jobset-uid": "0b5e-uid",
                    "jobset.sigs.k8s.io/replicatedjob-name": rj,
                    "jobset.sigs.k8s.io/restart-attempt": str(attempt),
                    "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
                    "jobset.sigs.k8s.io/global-replicas": str(total_jobs),
                    "jobset.sigs.k8s.io/job-index": str(job_index),
                    "jobset.sigs.k8s.io/job-key": hashlib.sha1(f"{ns}/{job}".encode()).hexdigest(),
                    "jobset.sigs.k8s.io/job-global-index": str(global_index),
                    "jobset.sigs.k8s.io/group-name": "default", "jobset.sigs.k8s.io/group-replicas": str(total_jobs),
                    "jobset.sigs.k8s.io/job-group-index": str(global_index)}
            for index in range(per_job):
                labels = {**keys, "batch.kubernetes.io/job-name": job, "job-name": job,
                          "batch.kubernetes.io/controller-uid": f"uid-{job}", "controller-uid": f"uid-{job}",
                          "batch.kubernetes.io/job-completion-index": str(index), **(extra_labels or {})}
                annotations = {**keys, "batch.kubernetes.io/job-completion-index": str(index),
                               **(set_annotations or {})}
                out.append(gpu_pod(f"{job}-{index}-x{attempt}", ns, labels, annotations))
            global_index += 1
    return out


def jobset(name: str, rjobs: list[dict], ns: str = "ml", annotations: dict | None = None) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
            "spec": {"replicatedJobs": rjobs}}


def rjob(name: str, replicas: int, parallelism: int, completions: int | None = None, **extra) -> dict:
    job_spec: dict = {"parallelism": parallelism, "completionMode": "Indexed", "template": {"spec": {}}}
    if completions is not None:
        job_spec["completions"] = completions
    return {"name": name, "replicas": replicas, "template": {"spec": job_spec, **extra.pop("template", {})}, **extra}


def spec_of(pods: list[dict], *objects: dict, translator: ko.Translator = T):
    facts = [translator.pod(p) for p in pods]
    groups = {g.id: g for g in (translator.group(o) for o in objects)}
    return gangspec.build(facts[0].gang.key, facts, gangspec.group_of(groups, facts[0]), 60.0), facts


# -- JobSet ------------------------------------------------------------------------------------


def test_a_jobset_of_two_replicated_jobs_is_one_gang_sized_from_the_jobset():
    pods = jobset_pods("train", [("workers", 2, 4), ("evaluator", 1, 2)])
    js = jobset("train", [rjob("workers", 2, 4, 4), rjob("evaluator", 1, 2)])
    spec, facts = spec_of(pods, js)
    assert {f.gang.key for f in facts} == {"ml/train@0"}
    assert facts[0].gang.group_id == (JOBSETS, "ml/train") and facts[0].gang.lineage == "ml/train"
    assert spec.min_member == 10 and spec.sized and not spec.invalid
    assert spec.lineage == "ml/train" and spec.lead_size == 0 and not any(m.lead for m in spec.members)
    # Ranks: (global Job index, completion index), unique across replicatedJobs (job-index is
    # 0 in the first Job of each: the old (job-index, index) rank collided).
    ranks = [f.rank for f in facts]
    assert len(set(ranks)) == 10 and (2, 0) in ranks and (2, 1) in ranks
    # Where each rank goes among the 10, whichever pods exist yet: Jobs x pods per Job, in order.
    assert spec.rank_layout == ((2, 4), (1, 2))
    assert origin(spec, facts[0].gang) == ("JobSet ml/train attempt 0: size 10 from JobSet ml/train "
                                           "spec.replicatedJobs (workers 2 x 4 + evaluator 1 x 2 pods)")


def test_pods_per_job_are_parallelism_capped_by_completions_as_kueue_counts_them():
    # kueue@v0.17.0 PodsCountPerReplica: parallelism (default 1), at most completions.
    js = jobset("t", [rjob("a", 3, 4, 2), rjob("b", 2, 1), {"name": "c", "template": {"spec": {}}}])
    (size,) = [d for d in T.group(js).declarations if d.role == MIN_MEMBER]
    assert size.value == 3 * 2 + 2 * 1 + 1 * 1


def test_each_restart_attempt_is_a_new_gang_of_one_lineage():
    old = [T.pod(p) for p in jobset_pods("train", [("w", 1, 2)], attempt=0)]
    new = [T.pod(p) for p in jobset_pods("train", [("w", 1, 2)], attempt=1)]
    assert {p.gang.key for p in old} == {"ml/train@0"} and {p.gang.key for p in new} == {"ml/train@1"}
    assert {p.gang.lineage for p in old + new} == {"ml/train"}
    assert {p.gang.group_id for p in old + new} == {(JOBSETS, "ml/train")}


def test_a_users_group_label_still_wins_but_attempts_stay_apart():
    pods = jobset_pods("train", [("w", 1, 2)], attempt=3, extra_labels={"scheduling.x-k8s.io/pod-group": "llama"})
    ref = T.pod(pods[0]).gang
    assert ref.key == "ml/llama@3" and ref.group_id == (SCHEDULER_PLUGINS, "ml/llama") and ref.lineage == "ml/llama"
    assert ref.workload == "JobSet ml/train attempt 3"


@pytest.mark.parametrize("where", ["jobset", "replicatedjob"])
def test_exclusive_placement_makes_each_jobs_index_0_pod_a_lead(where):
    excl = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "network.topology.nvidia.com/accelerator"}
    pods = jobset_pods("ex", [("w", 2, 4)], set_annotations=excl)
    js = (jobset("ex", [rjob("w", 2, 4)], annotations=excl) if where == "jobset"
          else jobset("ex", [rjob("w", 2, 4, template={"metadata": {"annotations": excl}})]))
    spec, facts = spec_of(pods, js)
    leads = sorted(f.name for f in facts if f.lead)
    assert leads == ["ex-w-0-0-x0", "ex-w-1-0-x0"]
    assert spec.lead_size == 2 and spec.min_member == 8 and [m.lead for m in spec.members].count(True) == 2


@pytest.mark.parametrize("where", ["jobset", "replicatedjob"])
def test_exclusive_placement_makes_each_job_a_slice_of_its_own(where):
    # jobset@v0.12.0 pod_webhook.go setExclusiveAffinities: one Job per domain of the key.
    excl = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "network.topology.nvidia.com/accelerator"}
    pods = jobset_pods("ex", [("w", 3, 2)], set_annotations=excl)
    js = (jobset("ex", [rjob("w", 3, 2)], annotations=excl) if where == "jobset"
          else jobset("ex", [rjob("w", 3, 2, template={"metadata": {"annotations": excl}})]))
    leads = [p for p in pods if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "0"]
    spec, facts = spec_of(leads, js)
    assert not spec.invalid, spec.invalid
    assert spec.exclusive and spec.slice_size == 2 and spec.slice_level == "network.topology.nvidia.com/accelerator"
    assert spec.min_member == 6 and [m.part for m in spec.members] == [0, 1, 2]
    assert [f.part for f in (T.pod(p) for p in pods)] == [0, 0, 1, 1, 2, 2]


def test_a_job_without_exclusive_placement_beside_exclusive_ones_gets_a_domain_of_its_own_too():
    # The exclusive leaders' anti-affinity keeps every other Job's pods out of their domains.
    excl = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"}
    js = jobset("mix", [rjob("a", 1, 2, template={"metadata": {"annotations": excl}}), rjob("b", 2, 2)])
    spec, _ = spec_of(jobset_pods("mix", [("a", 1, 2), ("b", 2, 2)]), js)
    assert not spec.invalid and spec.exclusive and spec.slice_size == 2 and spec.lead_size == 1


@pytest.mark.parametrize("rjobs, says", [
    ([rjob("driver", 1, 1), rjob("w", 2, 4)],
     "JobSet ml/uneq: exclusive placement of Jobs of different sizes (driver 1 x 1 + w 2 x 4 pods): railyard "
     "places each Job as a slice of one size in a domain of its own"),
    ([rjob("a", 1, 2, template={"metadata": {"annotations": {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "block"}}}), rjob("w", 2, 2)],
     "JobSet ml/uneq: replicatedJobs are placed exclusively at different levels (block, rack)"),
])
def test_exclusive_jobsets_railyard_cannot_cut_in_equal_slices_are_refused_with_the_numbers(rjobs, says):
    excl = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"}
    group = T.group(jobset("uneq", rjobs, annotations=excl))
    assert any(says in p for p in group.problems), group.problems


def test_exclusive_placement_and_railyards_own_slices_are_not_mixed():
    excl = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"}
    pods = jobset_pods("both", [("w", 2, 2)], set_annotations={**excl, "railyard.io/slice-size": "2",
                                                               "railyard.io/slice-required-topology": "rack"})
    spec, _ = spec_of(pods, jobset("both", [rjob("w", 2, 2)], annotations=excl))
    assert any("gives each part a domain of its own; railyard.io/slice-size cuts the gang into slices as well"
               in p for p in spec.invalid), spec.invalid


def test_a_pod_outside_the_jobsets_jobs_is_a_problem_of_the_gang():
    excl = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"}
    pods = jobset_pods("out", [("w", 2, 2)], set_annotations=excl)
    pods[3]["metadata"]["labels"]["jobset.sigs.k8s.io/job-global-index"] = "7"
    spec, _ = spec_of(pods, jobset("out", [rjob("w", 2, 2)], annotations=excl))
    assert any(p.startswith("pod ml/out-w-1-1-x0 is in part 7, but the gang has parts 0-1 (JobSet ml/out "
                            "exclusive-topology rack") for p in spec.invalid), spec.invalid


def test_exclusive_placement_by_node_selector_has_no_leads():
    # jobset@v0.12.0 pod_webhook.go: with the node-selector strategy the webhook orders nothing.
    excl = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack",
            "alpha.jobset.sigs.k8s.io/node-selector": "true"}
    spec, facts = spec_of(jobset_pods("ns", [("w", 2, 2)], set_annotations=excl),
                          jobset("ns", [rjob("w", 2, 2)], annotations=excl))
    assert not any(f.lead for f in facts) and spec.lead_size == 0 and spec.min_member == 4


def test_a_jobset_in_stages_declares_no_size_so_no_stage_waits_for_the_next():
    # A Trainer runtime's shape (trainer@v2.3.0 charts/.../torchtune-llama3.2-1b.yaml): the
    # initializer finishes before `node` exists; a size counting both could never be reached.
    js = jobset("tj", [rjob("dataset-initializer", 1, 1),
                       rjob("node", 1, 4, 4, dependsOn=[{"name": "dataset-initializer", "status": "Complete"}])])
    pods = jobset_pods("tj", [("dataset-initializer", 1, 1)])
    spec, _ = spec_of(pods, js)
    assert not spec.sized and not spec.invalid and spec.size_from == ""


def trainjob_podgroup(min_member: int) -> dict:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "tj", "namespace": "ml", "ownerReferences": [
                {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "tj", "uid": "u",
                 "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"minMember": min_member, "minResources": {}, "scheduleTimeoutSeconds": 120}}


def test_a_trainjobs_podgroup_gives_no_size_it_counts_initializers():
    group = T.group(trainjob_podgroup(5))
    assert [d.role for d in group.declarations] == ["timeout"]
    kept = ko.Translator(DEFAULT_GPU_RESOURCE, workloads=set(KINDS) - {TRAINJOBS}).group(trainjob_podgroup(5))
    assert [d.value for d in kept.declarations if d.role == MIN_MEMBER] == [5]


# -- LeaderWorkerSet ----------------------------------------------------------------------------


def lws_pods(name: str, group: int, size: int, ns: str = "ml", exclusive: str = "") -> list[dict]:
    leader = f"{name}-{group}"
    key = hashlib.sha1(f"{ns}/{leader}".encode()).hexdigest()
    extra = {"leaderworkerset.sigs.k8s.io/exclusive-topology": exclusive} if exclusive else {}
    pods = [gpu_pod(leader, ns, {"leaderworkerset.sigs.k8s.io/name": name,
                                 "leaderworkerset.sigs.k8s.io/worker-index": "0",
                                 "leaderworkerset.sigs.k8s.io/group-index": str(group),
                                 "leaderworkerset.sigs.k8s.io/group-key": key,
                                 "leaderworkerset.sigs.k8s.io/template-revision-hash": "5f7c"},
                    {"leaderworkerset.sigs.k8s.io/size": str(size), **extra})]
    for w in range(1, size):
        pods.append(gpu_pod(f"{leader}-{w}", ns, {"leaderworkerset.sigs.k8s.io/name": name,
                                                  "leaderworkerset.sigs.k8s.io/worker-index": str(w),
                                                  "leaderworkerset.sigs.k8s.io/group-index": str(group),
                                                  "leaderworkerset.sigs.k8s.io/group-key": key,
                                                  "leaderworkerset.sigs.k8s.io/template-revision-hash": "5f7c"},
                            {"leaderworkerset.sigs.k8s.io/size": str(size),
                             "leaderworkerset.sigs.k8s.io/leader-name": leader, **extra}))
    return pods


def lws(name: str, policy: str = "LeaderCreated", annotations: dict | None = None) -> dict:
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": "ml", "annotations": annotations or {}},
            "spec": {"replicas": 2, "startupPolicy": policy, "leaderWorkerTemplate": {"size": 4}}}


def test_a_leaderworkerset_group_is_one_gang_of_its_size():
    spec, facts = spec_of(lws_pods("vllm", 1, 4), lws("vllm"))
    assert {f.gang.key for f in facts} == {"ml/vllm-1"} and facts[0].gang.group_id == (LEADERWORKERSETS, "ml/vllm")
    assert spec.min_member == 4 and spec.size_from == "leaderworkerset.sigs.k8s.io/size"
    assert [f.rank for f in facts] == [(0,), (1,), (2,), (3,)]
    assert [f.lead for f in facts] == [True, False, False, False] and spec.lead_size == 0
    assert T.pod(lws_pods("vllm", 0, 4)[0]).gang.key == "ml/vllm-0"


def test_leader_ready_and_exclusive_topology_make_the_leader_bind_first():
    ready, _ = spec_of(lws_pods("a", 0, 4), lws("a", "LeaderReady"))
    assert ready.lead_size == 1
    excl, _ = spec_of(lws_pods("b", 0, 4, exclusive="rack"), lws("b", annotations={
        "leaderworkerset.sigs.k8s.io/exclusive-topology": "rack"}))
    assert excl.lead_size == 1
    # The LeaderWorkerSet API not served: the pods' own annotation still says it.
    alone, _ = spec_of(lws_pods("c", 0, 4, exclusive="rack"))
    assert alone.lead_size == 1 and alone.min_member == 4


# -- Indexed Job that opts in -------------------------------------------------------------------


def job_pods(name: str, n: int, opt_in: str = "true", ns: str = "ml") -> list[dict]:
    return [gpu_pod(f"{name}-{i}-abcde", ns, {"railyard.io/gang": opt_in, "batch.kubernetes.io/job-name": name,
                                              "job-name": name, "batch.kubernetes.io/controller-uid": "u1",
                                              "controller-uid": "u1", "batch.kubernetes.io/job-completion-index": str(i)},
                    {"batch.kubernetes.io/job-completion-index": str(i)}) for i in range(n)]


def test_an_indexed_job_that_opts_in_is_one_gang_of_its_parallelism():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bert", "namespace": "ml",
                                                                 "labels": {"railyard.io/gang": "true"}},
           "spec": {"parallelism": 4, "completions": 4, "completionMode": "Indexed"}}
    spec, facts = spec_of(job_pods("bert", 2), job)
    assert {f.gang.key for f in facts} == {"ml/bert"} and facts[0].gang.group_id == (JOBS, "ml/bert")
    assert spec.min_member == 4 and spec.size_from == "Job ml/bert spec.parallelism"
    (jobs,) = [r for r in GROUPS if r.kind == JOBS]
    assert jobs.path == "/apis/batch/v1/jobs" and jobs.label_selector == "railyard.io/gang=true"


def test_a_job_without_the_opt_in_keeps_its_pods_gangs_of_one():
    pod = job_pods("plain", 1)[0]
    del pod["metadata"]["labels"]["railyard.io/gang"]
    assert not T.pod(pod).gang.named


def test_an_unreadable_opt_in_is_a_problem_of_the_gang():
    facts = T.pod(job_pods("bert", 1, opt_in="yes")[0])
    assert any('railyard.io/gang must be "true"' in p for p in facts.problems)
    lone = gpu_pod("p", "ml", {"railyard.io/gang": "true"}, {})
    assert any("no batch.kubernetes.io/job-name" in p for p in T.pod(lone).problems)


# -- switched off, bounds ---------------------------------------------------------------------


def test_every_kind_can_be_switched_off():
    assert set(WorkloadSettings().enabled()) == set(KINDS)
    off = ko.Translator(DEFAULT_GPU_RESOURCE, workloads=())
    for pod in (jobset_pods("t", [("w", 1, 1)])[0], lws_pods("v", 0, 2)[0], job_pods("j", 1)[0]):
        facts = off.pod(pod)
        assert not facts.gang.named and not facts.lead and not facts.declarations
    kinds = {r.kind for r in resources_for(())}
    assert not kinds & {JOBSETS, LEADERWORKERSETS, JOBS} and "pods" in kinds


@pytest.mark.parametrize("label, value, says", [
    ("jobset.sigs.k8s.io/restart-attempt", "-1", "restart-attempt must be a whole number"),
    ("jobset.sigs.k8s.io/restart-attempt", "9" * 12, "at most 9 digits"),
    ("jobset.sigs.k8s.io/jobset-name", "x" * 300, "must be an object name"),
    ("jobset.sigs.k8s.io/jobset-name", "a@b", "must be an object name"),
])
def test_unreadable_jobset_labels_are_problems_not_crashes(label, value, says):
    pod = jobset_pods("t", [("w", 1, 1)])[0]
    pod["metadata"]["labels"][label] = value
    facts = T.pod(pod)
    assert facts.gang.named and any(says in p for p in facts.problems)
    assert len(facts.gang.key) < 300


@pytest.mark.parametrize("field, value", [("replicas", -1), ("replicas", "4"), ("replicas", 10**12),
                                          ("parallelism", True)])
def test_unreadable_jobset_counts_are_problems(field, value):
    rj = rjob("w", 1, 4)
    (rj if field == "replicas" else rj["template"]["spec"])[field] = value
    group = T.group(jobset("t", [rj]))
    assert group.problems and not group.declarations


def test_a_jobset_larger_than_railyard_plans_is_refused_with_its_size():
    spec, _ = spec_of(jobset_pods("big", [("w", 1, 1)]), jobset("big", [rjob("w", 100_000, 8)]))
    assert any("must be at most 100000" in p for p in spec.invalid)


def test_lws_size_and_group_index_are_bounded():
    pods = lws_pods("v", 0, 2)
    pods[0]["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"] = "lots"
    pods[1]["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] = "x"
    spec, facts = spec_of(pods[:1])
    assert any("must be a positive integer" in p for p in spec.invalid)
    assert any("group-index must be a whole number" in p for p in T.pod(pods[1]).problems)


# -- Kubeflow v1 (training-operator) -----------------------------------------------------------


def pytorchjob_pods(name: str, workers: int, convention: str) -> list[dict]:
    out = []
    for rtype, count in (("master", 1), ("worker", workers)):
        for i in range(count):
            labels = {"training.kubeflow.org/operator-name": "pytorchjob-controller",
                      "training.kubeflow.org/job-name": name, "training.kubeflow.org/replica-type": rtype,
                      "training.kubeflow.org/replica-index": str(i)}
            if rtype == "master":
                labels["training.kubeflow.org/job-role"] = "master"
            annotations = {}
            if convention == "scheduler-plugins":
                labels["scheduling.x-k8s.io/pod-group"] = name
            else:
                annotations.update({"scheduling.k8s.io/group-name": name, "volcano.sh/task-spec": rtype})
            out.append(gpu_pod(f"{name}-{rtype}-{i}", "ml", labels, annotations))
    return out


@pytest.mark.parametrize("convention, kind, api", [
    ("scheduler-plugins", SCHEDULER_PLUGINS, "scheduling.x-k8s.io/v1alpha1"),
    ("volcano", VOLCANO, "scheduling.volcano.sh/v1beta1"),
])
def test_a_kubeflow_v1_pytorchjob_is_the_gang_of_the_podgroup_it_makes(convention, kind, api):
    pods = pytorchjob_pods("bert", 3, convention)
    pg = {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": "bert", "namespace": "ml"},
          "spec": {"minMember": 4}}
    spec, facts = spec_of(pods, pg)
    assert {f.gang.key for f in facts} == {"ml/bert"} and facts[0].gang.group_id == (kind, "ml/bert")
    assert spec.min_member == 4 and not spec.invalid
    # The master and worker 0 both have replica-index 0: the master ranks first, then the workers.
    assert [f.rank for f in facts] == [(0, 0), (1, 0), (1, 1), (1, 2)]
