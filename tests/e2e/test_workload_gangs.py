"""Real training workloads become railyard gangs with no extra labels (issue 20 items 2 and 5).

One cluster with the extender, kube-controller-manager and the JobSet, LeaderWorkerSet and
Kubeflow Trainer controllers (``cluster up --with-jobset --with-lws --with-trainer``); every
workload is an ``examples/workloads/`` manifest, created as a user would apply it.

Where pods land is asserted against this file's own model of the topology, not railyard's:
six 8-GPU nodes in three NVLink domains (``DOMAIN``); before each workload, filler pods pinned
to h1 and h3 take 6 GPUs each, so NVLink domains nvl1 and nvl2 have 2 + 8 GPUs free and only
nvl3 (16) holds a workload of 12-16 GPUs whole. Pods placed one by one (what main did: each
workload pod was a gang of one) go best fit and scatter over the domains.

Which test covers which gap of issue 20 "Where it stands" (each fails on main before this
branch): plain Indexed Job / JobSet / LWS pods are gangs of one, scattered ->
``test_an_indexed_job_that_opts_in``, ``test_a_jobset_of_two_replicated_jobs``,
``test_a_leaderworkerset_group_leader_created``; JobSet ranks collide across replicatedJobs ->
``test_a_jobset_of_two_replicated_jobs`` (unique ``railyard.io/rank`` by global Job index);
both restart attempts one gang with a user's group label -> ``test_a_restarted_jobset_is_a_new_gang``;
a replacement member without its address -> ``test_a_replaced_job_member_is_told_its_old_address``
(needs the startup branch's core); ordered startup stalls -> the three ``ordered`` tests
(JobSet exclusive and LWS LeaderReady need the startup branch's core; the TrainJob with an
initializer needs only this branch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import BatchV1Api, CustomObjectsApi

from .helpers import GPU, Cluster, gpu_node, gpu_pod, namespace, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workloads"
NVL = "network.topology.nvidia.com/accelerator"
DOMAIN = {"h1": "nvl1", "h2": "nvl1", "h3": "nvl2", "h4": "nvl2", "h5": "nvl3", "h6": "nvl3"}
"""The test's model: node -> NVLink domain, as the node labels below say."""
FILLERS = {"h1": 6, "h3": 6}
"""GPUs taken before each workload: nvl1 and nvl2 keep 10 free, nvl3 16."""
CAPACITY = 8
JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
TRAINER = ("trainer.kubeflow.org", "v1alpha1")
RANK, SLICE, NVLINK_DOMAIN = "railyard.io/rank", "railyard.io/slice", "railyard.io/domain.nvlink"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


@pytest.fixture(scope="module")
def cluster(local_cluster, controller_binaries) -> Cluster:
    nodes = [gpu_node(n, CAPACITY, labels={NVL: d}) for n, d in DOMAIN.items()]
    return local_cluster(nodes=nodes, extender=True, workload_controllers=("jobset", "lws", "trainer"))


@pytest.fixture
def ns(cluster: Cluster, request) -> Any:
    """A fresh namespace with the fillers running; its workloads and pods deleted afterwards,
    pass or fail, so the next test starts from the same free GPUs."""
    name = namespace(cluster.core, request.node.name.removeprefix("test_")[:20].rstrip("_").replace("_", "-"))
    if "exclusive" not in request.node.name:
        fill(cluster, name)
    yield name
    cleanup(cluster, name)


def example(name: str) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all((EXAMPLES / name).read_text()) if o]


def fill(cluster: Cluster, ns: str) -> None:
    """The filler pods (gangs of one), pinned, Running before the workload is created."""
    for node, gpus in FILLERS.items():
        pod = gpu_pod(f"filler-{node}", gpus)
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        cluster.core.create_namespaced_pod(ns, pod)
    wait_for(lambda: all(p.status.phase == "Running" for p in cluster.core.list_namespaced_pod(ns).items)
             and len(cluster.core.list_namespaced_pod(ns).items) == len(FILLERS), 60, "the fillers to run")


def fitting_domains(pods: int, gpus: int) -> set[str]:
    """The model: NVLink domains with room for ``pods`` pods of ``gpus`` GPUs beside the fillers."""
    free: dict[str, list[int]] = {}
    for node, domain in DOMAIN.items():
        free.setdefault(domain, []).append(CAPACITY - FILLERS.get(node, 0))
    return {d for d, nodes in free.items() if sum(n // gpus for n in nodes) >= pods}


def workload_pods(cluster: Cluster, ns: str, selector: str, count: int, timeout: float = 120) -> list[Any]:
    """Wait until ``count`` pods match ``selector``, all Running; return them."""
    def ready() -> list[Any] | None:
        pods = [p for p in cluster.core.list_namespaced_pod(ns, label_selector=selector).items
                if not p.metadata.deletion_timestamp]
        ok = len(pods) == count and all(p.status.phase == "Running" and p.spec.node_name for p in pods)
        return pods if ok else None

    try:
        return wait_for(ready, timeout, f"{count} Running pods with {selector!r}")
    except AssertionError as exc:
        seen = [(p.metadata.name, p.status.phase, p.spec.node_name)
                for p in cluster.core.list_namespaced_pod(ns, label_selector=selector).items]
        raise AssertionError(f"{exc}; seen {seen}; railyard: {gangs_of(cluster, ns)}") from None


def gangs_of(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    return {k: g for k, g in cluster.extender_gangs().items() if k.startswith(f"{ns}/")}


def workload_place(pod: Any) -> tuple[int, ...]:
    """The pod's number in its workload: (global Job index, completion index) in a JobSet, the
    completion index in a Job, the worker index in a LeaderWorkerSet."""
    labels = pod.metadata.labels or {}
    return tuple(int(labels[k]) for k in (GLOBAL_INDEX, COMPLETION_INDEX, WORKER_INDEX) if k in labels)


def assert_whole_in_one_domain(pods: list[Any], gpus: int, workload_ranks: bool = True) -> str:
    """Every pod in the one NVLink domain the model says fits, each told a rank of its own (0 ..
    n-1) and its domain; with ``workload_ranks``, each pod's rank is its place in its workload's
    own numbering, whatever order the controller created the pods in."""
    fits = fitting_domains(len(pods), gpus)
    assert len(fits) == 1, f"test set-up: {fits} fit"
    domains = {DOMAIN[p.spec.node_name] for p in pods}
    assert domains == fits, f"pods landed in {sorted(domains)}, only {sorted(fits)} holds them whole: " \
                            f"{sorted((p.metadata.name, p.spec.node_name) for p in pods)}"
    ranks = sorted((p.metadata.annotations or {}).get(RANK, "none") for p in pods)
    assert ranks == sorted(str(r) for r in range(len(pods))), [(p.metadata.name, p.metadata.annotations) for p in pods]
    if workload_ranks:
        told = {p.metadata.name: int(p.metadata.annotations[RANK]) for p in pods}
        expected = {p.metadata.name: r for r, p in enumerate(sorted(pods, key=workload_place))}
        assert told == expected, [(p.metadata.name, workload_place(p), told[p.metadata.name]) for p in pods]
    for pod in pods:
        annotations = pod.metadata.annotations or {}
        assert annotations.get(NVLINK_DOMAIN) == DOMAIN[pod.spec.node_name], (pod.metadata.name, annotations)
    return fits.pop()


def _custom(cluster: Cluster) -> CustomObjectsApi:
    return CustomObjectsApi(cluster.core.api_client)


def create(cluster: Cluster, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "Job":
        return BatchV1Api(cluster.core.api_client).create_namespaced_job(ns, obj).to_dict()
    group, version = obj["apiVersion"].split("/")
    plural = obj["kind"].lower() + "s"
    return _custom(cluster).create_namespaced_custom_object(group, version, ns, plural, obj)


def cleanup(cluster: Cluster, ns: str) -> None:
    """Delete the namespace's workloads and pods, and wait until railyard holds nothing there."""
    custom = _custom(cluster)
    for group, version, plural in (JOBSET, LWS, (*TRAINER, "trainjobs")):
        for obj in custom.list_namespaced_custom_object(group, version, ns, plural)["items"]:
            custom.delete_namespaced_custom_object(group, version, ns, plural, obj["metadata"]["name"],
                                                   body={"propagationPolicy": "Foreground"})
    BatchV1Api(cluster.core.api_client).delete_collection_namespaced_job(ns, propagation_policy="Foreground")
    cluster.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    wait_for(lambda: not cluster.core.list_namespaced_pod(ns).items, 120, f"the pods of {ns} to be gone")


# ------------------------------------------------------------------ all members at once


def runs_whole(cluster: Cluster, ns: str, manifest: str, selector: str, count: int, gpus: int) -> list[Any]:
    """Create an example's objects; its ``count`` pods run whole in the one fitting domain."""
    for obj in example(manifest):
        create(cluster, ns, obj)
    pods = workload_pods(cluster, ns, selector, count)
    assert_whole_in_one_domain(pods, gpus)
    return pods


def test_an_indexed_job_that_opts_in_runs_whole_in_the_narrowest_domain(cluster, ns):
    runs_whole(cluster, ns, "indexed-job.yaml", "batch.kubernetes.io/job-name=bert", 4, 4)
    gang = gangs_of(cluster, ns)[f"{ns}/bert"]
    assert gang["origin"] == f"Job {ns}/bert: size 4 from Job {ns}/bert spec.parallelism", gang


def test_a_replaced_job_member_is_told_its_old_address(cluster, ns):
    (job,) = example("indexed-job.yaml")
    create(cluster, ns, job)
    pods = workload_pods(cluster, ns, "batch.kubernetes.io/job-name=bert", 4)
    home = assert_whole_in_one_domain(pods, 4)
    lost = next(p for p in pods if p.metadata.labels[COMPLETION_INDEX] == "2")
    cluster.core.delete_namespaced_pod(lost.metadata.name, ns, grace_period_seconds=0)

    def replacement() -> Any:
        return next((p for p in cluster.core.list_namespaced_pod(ns, label_selector=f"{COMPLETION_INDEX}=2").items
                     if p.metadata.uid != lost.metadata.uid and p.spec.node_name), None)
    new = wait_for(replacement, 120, "index 2's replacement bound")
    annotations = new.metadata.annotations or {}
    assert DOMAIN[new.spec.node_name] == home
    told = (lost.metadata.annotations or {}).get(RANK)
    assert told is not None and annotations.get(RANK) == told and annotations.get(NVLINK_DOMAIN) == home, annotations


def test_a_jobset_of_two_replicated_jobs_runs_whole_with_unique_ranks(cluster, ns):
    pods = runs_whole(cluster, ns, "jobset.yaml", "jobset.sigs.k8s.io/jobset-name=train", 6, 2)
    # What railyard reads as each pod's rank is unique: (job-global-index, completion index);
    # job-index is 0 in the first Job of both replicatedJobs.
    assert len({(p.metadata.labels[GLOBAL_INDEX], p.metadata.labels[COMPLETION_INDEX]) for p in pods}) == 6
    gang = gangs_of(cluster, ns)[f"{ns}/train@0"]
    assert gang["origin"] == (f"JobSet {ns}/train attempt 0: size 6 from JobSet {ns}/train spec.replicatedJobs "
                              f"(leader 1 x 2 + workers 2 x 2 pods)"), gang


def test_a_restarted_jobset_is_a_new_gang_never_merged_with_the_old_attempt(cluster, ns):
    # With a user's group label and size in the template (what a user of scheduler-plugins'
    # coscheduling writes): on main both attempts were the one gang <ns>/llama.
    (js,) = example("jobset.yaml")
    for rj in js["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["metadata"] = {
            "labels": {"scheduling.x-k8s.io/pod-group": "llama"}, "annotations": {"railyard.io/min-member": "6"}}
    create(cluster, ns, js)
    selector = "jobset.sigs.k8s.io/jobset-name=train"
    first = workload_pods(cluster, ns, selector, 6)
    # A group of the user's names no JobSet layout: pods created after the plan take the free
    # slots as they come (docs/workloads.md), so their ranks need not follow the Job indexes.
    home = assert_whole_in_one_domain(first, 2, workload_ranks=False)
    leader = next(p for p in first if p.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"] == "leader"
                  and p.metadata.labels[COMPLETION_INDEX] == "0")
    # What a kubelet reports when the container exits 1 (restartPolicy Never).
    cluster.core.patch_namespaced_pod_status(leader.metadata.name, ns, {"status": {
        "phase": "Failed",
        "containerStatuses": [{"name": "leader", "image": "registry.k8s.io/pause:3.10", "imageID": "",
                               "ready": False, "restartCount": 0,
                               "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}})
    second = workload_pods(cluster, ns, f"{selector},{RESTART_ATTEMPT}=1", 6)
    assert not {p.metadata.uid for p in second} & {p.metadata.uid for p in first}
    assert assert_whole_in_one_domain(second, 2, workload_ranks=False) == home
    gangs = gangs_of(cluster, ns)
    assert gangs[f"{ns}/llama@1"]["phase"] == "bound", gangs
    assert f"{ns}/llama" not in gangs, gangs


def test_a_leaderworkerset_group_leader_created_runs_whole(cluster, ns):
    runs_whole(cluster, ns, "lws-leader-created.yaml", "leaderworkerset.sigs.k8s.io/name=serve", 3, 4)
    gang = gangs_of(cluster, ns)[f"{ns}/serve-0"]
    assert gang["origin"] == (f"LeaderWorkerSet {ns}/serve group 0: size 3 from "
                              f"leaderworkerset.sigs.k8s.io/size"), gang


# ------------------------------------------------------------- ordered startup


def test_ordered_a_trainjob_with_an_initializer_never_stalls(cluster, ns):
    for obj in example("trainjob.yaml"):
        create(cluster, ns, obj)
    selector = "jobset.sigs.k8s.io/jobset-name=tune"
    wait_for(lambda: [p for p in cluster.core.list_namespaced_pod(
        ns, label_selector=f"{selector},jobset.sigs.k8s.io/replicatedjob-name=dataset-initializer").items
        if p.status.phase == "Succeeded"], 120, "the dataset initializer to succeed")
    nodes = workload_pods(cluster, ns, f"{selector},jobset.sigs.k8s.io/replicatedjob-name=node", 3)
    assert_whole_in_one_domain(nodes, 4)


def test_ordered_a_jobset_with_exclusive_placement_binds_its_leads_first(cluster, ns):
    (js,) = example("jobset-exclusive.yaml")
    create(cluster, ns, js)
    pods = workload_pods(cluster, ns, "jobset.sigs.k8s.io/jobset-name=excl", 4, timeout=180)
    # One Job per NVLink domain (JobSet's own rule), each Job's two pods together.
    by_job: dict[str, set[str]] = {}
    for p in pods:
        by_job.setdefault(p.metadata.labels["batch.kubernetes.io/job-name"], set()).add(DOMAIN[p.spec.node_name])
    assert all(len(d) == 1 for d in by_job.values()) and len(set().union(*by_job.values())) == 2, by_job
    ranks = sorted(int((p.metadata.annotations or {}).get(RANK, -1)) for p in pods)
    assert ranks == [0, 1, 2, 3], [(p.metadata.name, p.metadata.annotations) for p in pods]
    assert gangs_of(cluster, ns)[f"{ns}/excl@0"]["phase"] == "bound"
    # Planned so by railyard (each Job told its own slice), not found by kube-scheduler refusing
    # its nodes one by one.
    slices = {job: {p.metadata.annotations.get(SLICE) for p in pods
                    if p.metadata.labels["batch.kubernetes.io/job-name"] == job} for job in by_job}
    assert sorted(map(tuple, slices.values())) == [("0",), ("1",)], slices


def test_ordered_a_leaderworkerset_leader_ready_binds_its_leader_first(cluster, ns):
    runs_whole(cluster, ns, "lws-leader-ready.yaml", "leaderworkerset.sigs.k8s.io/name=ready", 3, 4)
