"""JobSet, LeaderWorkerSet and Kubeflow Trainer run by their real controllers (issue 20 item 1).

One cluster with the extender and all three controllers (``cluster up --with-jobset --with-lws
--with-trainer``; kube-controller-manager makes the pods of their Jobs and StatefulSets). These
are smoke tests of the controllers on the local cluster; railyard's gangs of these workloads are
tested in ``test_workload_gangs.py`` (docs/workloads.md). What they pin down
are the labels and annotations each controller writes on the pods it makes, at the pinned
versions, as the API server returns them: the facts railyard's gang detection builds on.
``pytest -s`` prints each controller's keys as observed.

The objects are the projects' own examples, with GPU requests and smaller sizes:
- JobSet v0.12.0 ``site/static/examples/failure-policy/restartjobset-action.yaml`` (a leader
  and a workers replicatedJob, ``backoffLimit: 0``, ``RestartJobSet`` when the leader fails);
- LeaderWorkerSet v0.9.0 ``config/samples/leaderworkerset_v1_leaderworkerset.yaml``;
- Kubeflow Trainer v2.3.0 ``examples/yaml/05-multi-step.yaml`` (a TrainingRuntime with a
  ``dataset-initializer`` step the ``node`` step ``dependsOn``, and a TrainJob of 2 nodes), its
  ``node`` step as in ``manifests/base/runtimes/torch_distributed.yaml``.
Label and annotation keys are those of JobSet ``api/jobset/v1alpha2/jobset_types.go`` and
``pkg/constants/constants.go``, LWS ``api/leaderworkerset/v1/leaderworkerset_types.go`` and
Trainer ``pkg/constants/constants.go`` at those tags.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import BatchV1Api, CustomObjectsApi

from .helpers import GPU, Cluster, gpu_node, namespace, wait_for

JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
TRAINER = "trainer.kubeflow.org"
TRAINJOB = (TRAINER, "v1alpha1", "trainjobs")
RUNTIME = (TRAINER, "v1alpha1", "trainingruntimes")
PAUSE = "registry.k8s.io/pause:3.10"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
SIM_RUNTIME = "railyard.io/sim-runtime"
NODES = [f"h{i}" for i in range(1, 7)]


@pytest.fixture(scope="module")
def cluster(local_cluster, controller_binaries) -> Cluster:
    nodes = [gpu_node(n, labels={"network.topology.nvidia.com/accelerator": f"nvl{(i // 2) + 1}"})
             for i, n in enumerate(NODES)]
    return local_cluster(nodes=nodes, extender=True, workload_controllers=("jobset", "lws", "trainer"))


def _custom(cluster: Cluster) -> CustomObjectsApi:
    return CustomObjectsApi(cluster.core.api_client)


def _container(name: str, gpus: int) -> dict[str, Any]:
    return {"name": name, "image": PAUSE, "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}


def _pods(cluster: Cluster, ns: str, selector: str = "") -> list[Any]:
    return cluster.core.list_namespaced_pod(ns, label_selector=selector).items


def _running(cluster: Cluster, ns: str, selector: str, count: int, timeout: float = 120) -> list[Any]:
    """Wait until ``count`` pods match ``selector``, all Running on a kwok node; return them."""
    def ready() -> list[Any] | None:
        pods = [p for p in _pods(cluster, ns, selector) if not p.metadata.deletion_timestamp]
        ok = len(pods) == count and all(p.status.phase == "Running" and p.spec.node_name in NODES for p in pods)
        return pods if ok else None

    try:
        return wait_for(ready, timeout, f"{count} Running pods with {selector!r} in {ns}")
    except AssertionError as exc:
        seen = [(p.metadata.name, p.status.phase, p.spec.node_name) for p in _pods(cluster, ns, selector)]
        raise AssertionError(f"{exc}; seen {seen}") from None


def _show(kind: str, pods: list[Any], prefixes: tuple[str, ...]) -> None:
    """Print the controller's keys on each pod (``pytest -s``): the report of what was observed."""
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        labels = {k: v for k, v in (pod.metadata.labels or {}).items() if k.startswith(prefixes)}
        annotations = {k: v for k, v in (pod.metadata.annotations or {}).items() if k.startswith(prefixes)}
        print(f"{kind} pod {pod.metadata.name} on {pod.spec.node_name}: labels {json.dumps(labels, sort_keys=True)} "
              f"annotations {json.dumps(annotations, sort_keys=True)}")


def _delete(cluster: Cluster, ns: str, resource: tuple[str, str, str], name: str) -> None:
    """Delete a workload with foreground propagation and wait until its pods are gone."""
    group, version, plural = resource
    _custom(cluster).delete_namespaced_custom_object(group, version, ns, plural, name,
                                                     body={"propagationPolicy": "Foreground"})
    wait_for(lambda: not _pods(cluster, ns), 120, f"the pods of {plural}/{name} to be gone")


# -------------------------------------------------------------------------------- JobSet

def _jobset(name: str, max_restarts: int = 0) -> dict[str, Any]:
    """restartjobset-action.yaml, with GPUs: leader 1 Job x 2 pods, workers 2 Jobs x 2 pods."""
    def replicated(rj: str, replicas: int) -> dict[str, Any]:
        return {"name": rj, "replicas": replicas, "template": {"spec": {
            "backoffLimit": 0, "completions": 2, "parallelism": 2,
            "template": {"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                                  "containers": [_container(rj, 4)]}}}}}

    spec: dict[str, Any] = {"replicatedJobs": [replicated("leader", 1), replicated("workers", 2)]}
    if max_restarts:
        spec["failurePolicy"] = {"maxRestarts": max_restarts,
                                 "rules": [{"action": "RestartJobSet", "targetReplicatedJobs": ["leader"]}]}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name}, "spec": spec}


JOBSET_KEYS = ("jobset-name", "jobset-uid", "replicatedjob-name", "replicatedjob-replicas", "global-replicas",
               "job-index", "job-global-index", "job-key", "restart-attempt", "group-name", "group-replicas",
               "job-group-index")


def test_a_jobset_of_two_replicated_jobs_runs_on_kwok_nodes_with_its_labels(cluster):
    ns = namespace(cluster.core, "jobset")
    created = _custom(cluster).create_namespaced_custom_object(*JOBSET[:2], ns, JOBSET[2], _jobset("train"))
    uid = created["metadata"]["uid"]
    pods = _running(cluster, ns, "jobset.sigs.k8s.io/jobset-name=train", 6)
    _show("JobSet", pods, ("jobset.sigs.k8s.io/", COMPLETION_INDEX))

    jobs = {j.metadata.name: j for j in BatchV1Api(cluster.core.api_client).list_namespaced_job(ns).items}
    assert sorted(jobs) == ["train-leader-0", "train-workers-0", "train-workers-1"]
    assert all(j.metadata.owner_references[0].uid == uid for j in jobs.values())
    expected = {  # Job -> (replicatedJob, replicas, job-index, job-global-index)
        "train-leader-0": ("leader", "1", "0", "0"),
        "train-workers-0": ("workers", "2", "0", "1"),
        "train-workers-1": ("workers", "2", "1", "2"),
    }
    seen = set()
    for pod in pods:
        labels, annotations = pod.metadata.labels, pod.metadata.annotations
        job = labels["batch.kubernetes.io/job-name"]
        rj, replicas, index, global_index = expected[job]
        want = {"jobset-name": "train", "jobset-uid": uid, "replicatedjob-name": rj,
                "replicatedjob-replicas": replicas, "global-replicas": "3", "job-index": index,
                "job-global-index": global_index, "restart-attempt": "0",
                # No groupName in the spec: every replicatedJob is in group "default".
                "group-name": "default", "group-replicas": "3", "job-group-index": global_index}
        for key in JOBSET_KEYS:  # every key is both label and annotation (labelAndAnnotateObject)
            full = f"jobset.sigs.k8s.io/{key}"
            assert labels[full] == annotations[full], (pod.metadata.name, key)
            if key in want:
                assert labels[full] == want[key], (pod.metadata.name, key, labels[full])
        assert labels[COMPLETION_INDEX] == annotations[COMPLETION_INDEX]
        # The pod webhook's own label (exclusive placement compares priorities): it ran.
        assert labels["jobset.sigs.k8s.io/priority"] == "0" and "jobset.sigs.k8s.io/priority" not in annotations
        seen.add((job, labels[COMPLETION_INDEX]))
    # job-index repeats across replicatedJobs; (job-global-index, completion index) does not.
    assert seen == {(j, c) for j in expected for c in ("0", "1")}
    assert len({(p.metadata.labels["jobset.sigs.k8s.io/job-global-index"], p.metadata.labels[COMPLETION_INDEX])
                 for p in pods}) == 6
    _delete(cluster, ns, JOBSET, "train")


def test_a_failed_leader_restarts_the_jobset_as_attempt_1(cluster):
    ns = namespace(cluster.core, "restart")
    _custom(cluster).create_namespaced_custom_object(*JOBSET[:2], ns, JOBSET[2], _jobset("train", max_restarts=1))
    first = _running(cluster, ns, "jobset.sigs.k8s.io/jobset-name=train", 6)
    assert {p.metadata.labels[RESTART_ATTEMPT] for p in first} == {"0"}
    leader = next(p for p in first if p.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"] == "leader"
                  and p.metadata.labels[COMPLETION_INDEX] == "0")
    # What a kubelet reports when the container exits 1 (restartPolicy Never): kwok has no stage
    # for a Failed pod, so the status stays as patched.
    cluster.core.patch_namespaced_pod_status(leader.metadata.name, ns, {"status": {
        "phase": "Failed",
        "containerStatuses": [{"name": "leader", "image": PAUSE, "imageID": "", "ready": False, "restartCount": 0,
                               "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}})

    wait_for(lambda: (_custom(cluster).get_namespaced_custom_object(*JOBSET[:2], ns, JOBSET[2], "train")
                      .get("status") or {}).get("restarts") == 1, 120, "JobSet status.restarts 1")
    second = _running(cluster, ns, f"jobset.sigs.k8s.io/jobset-name=train,{RESTART_ATTEMPT}=1", 6)
    _show("JobSet attempt 1", second, (RESTART_ATTEMPT, "batch.kubernetes.io/job-"))
    assert not {p.metadata.uid for p in second} & {p.metadata.uid for p in first}
    assert {p.metadata.annotations[RESTART_ATTEMPT] for p in second} == {"1"}
    assert sorted((p.metadata.labels["batch.kubernetes.io/job-name"], p.metadata.labels[COMPLETION_INDEX])
                  for p in second) == sorted((p.metadata.labels["batch.kubernetes.io/job-name"],
                                              p.metadata.labels[COMPLETION_INDEX]) for p in first)
    # The Jobs keep their names across attempts; attempt 0's pods are all gone.
    wait_for(lambda: not _pods(cluster, ns, f"{RESTART_ATTEMPT}=0"), 60, "attempt 0's pods to be gone")
    _delete(cluster, ns, JOBSET, "train")


# ----------------------------------------------------------------------- LeaderWorkerSet

LWS_PREFIX = "leaderworkerset.sigs.k8s.io/"


def test_a_leaderworkerset_group_has_a_leader_and_workers_with_group_labels(cluster):
    ns = namespace(cluster.core, "lws")
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "serve"},
           "spec": {"replicas": 2, "leaderWorkerTemplate": {
               "size": 3, "restartPolicy": "RecreateGroupOnPodRestart",
               "workerTemplate": {"spec": {"terminationGracePeriodSeconds": 0,
                                           "containers": [_container("serve", 2)]}}}}}
    _custom(cluster).create_namespaced_custom_object(*LWS[:2], ns, LWS[2], lws)
    pods = _running(cluster, ns, f"{LWS_PREFIX}name=serve", 6)
    _show("LWS", pods, (LWS_PREFIX,))

    by_name = {p.metadata.name: p for p in pods}
    assert sorted(by_name) == ["serve-0", "serve-0-1", "serve-0-2", "serve-1", "serve-1-1", "serve-1-2"]
    keys = {}
    for name, pod in by_name.items():
        labels, annotations = pod.metadata.labels, pod.metadata.annotations
        group, _, worker = name.removeprefix("serve-").partition("-")
        assert labels[f"{LWS_PREFIX}group-index"] == group
        assert labels[f"{LWS_PREFIX}worker-index"] == (worker or "0")
        assert annotations[f"{LWS_PREFIX}size"] == "3"
        assert labels[f"{LWS_PREFIX}template-revision-hash"]
        if worker:
            assert annotations[f"{LWS_PREFIX}leader-name"] == f"serve-{group}"
        keys.setdefault(group, set()).add(labels[f"{LWS_PREFIX}group-key"])
    assert all(len(k) == 1 for k in keys.values()) and keys["0"] != keys["1"]
    _delete(cluster, ns, LWS, "serve")


# ------------------------------------------------------------------------------ Trainer

def _runtime(name: str) -> dict[str, Any]:
    """05-multi-step.yaml's TrainingRuntime. Trainer v2.3.0's own validator refuses that example
    as written (``pkg/runtime/framework/plugins/jobset/jobset.go``: a TrainJob with
    ``initializer.dataset`` needs a volumeMount named ``initializer`` in the dataset-initializer
    container), so the mount is added as its torchtune runtimes have it
    (``manifests/base/runtimes/torchtune/llama3_2/llama3_2_1B.yaml``), on an emptyDir instead of
    their PersistentVolumeClaim. kwok finishes the initializer a second after it runs."""
    initializer = {"metadata": {"annotations": {SIM_RUNTIME: "1s"}}, "spec": {
        "terminationGracePeriodSeconds": 0, "volumes": [{"name": "initializer", "emptyDir": {}}],
        "containers": [{"name": "dataset-initializer", "image": PAUSE,
                        "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]}]}}
    node = {"spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "node", "image": PAUSE}]}}

    def step(rj: str, ancestor: str, pod: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {"name": rj, **extra, "template": {
            "metadata": {"labels": {f"{TRAINER}/trainjob-ancestor-step": ancestor}}, "spec": {"template": pod}}}

    return {"apiVersion": f"{TRAINER}/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": name, "labels": {f"{TRAINER}/framework": "torch"}},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
                step("dataset-initializer", "dataset-initializer", initializer, replicas=1),
                step("node", "trainer", node, dependsOn=[{"name": "dataset-initializer", "status": "Complete"}]),
            ]}}}}


def test_a_trainjob_makes_its_jobset_and_its_node_pods_after_the_initializer(cluster):
    ns = namespace(cluster.core, "trainer")
    custom = _custom(cluster)
    custom.create_namespaced_custom_object(*RUNTIME[:2], ns, RUNTIME[2], _runtime("torch-with-dataset-init"))
    trainjob = custom.create_namespaced_custom_object(*TRAINJOB[:2], ns, TRAINJOB[2], {
        "apiVersion": f"{TRAINER}/v1alpha1", "kind": "TrainJob", "metadata": {"name": "multi-step"},
        "spec": {"runtimeRef": {"apiGroup": TRAINER, "kind": "TrainingRuntime", "name": "torch-with-dataset-init"},
                 "initializer": {"dataset": {"storageUri": "hf://tatsu-lab/alpaca"}},
                 "trainer": {"numNodes": 2, "resourcesPerNode": {"requests": {GPU: "4"}, "limits": {GPU: "4"}}}}})

    jobset = wait_for(lambda: _get(custom, ns, JOBSET, "multi-step"), 60, "the TrainJob's JobSet")
    (owner,) = jobset["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("TrainJob", trainjob["metadata"]["uid"], True)
    assert [rj["name"] for rj in jobset["spec"]["replicatedJobs"]] == ["dataset-initializer", "node"]

    selector = "jobset.sigs.k8s.io/jobset-name=multi-step"
    wait_for(lambda: [p for p in _pods(cluster, ns, f"{selector},jobset.sigs.k8s.io/replicatedjob-name=dataset-initializer")
                      if p.status.phase == "Succeeded"], 120, "the dataset initializer to succeed")
    nodes = _running(cluster, ns, f"{selector},jobset.sigs.k8s.io/replicatedjob-name=node", 2)
    initializer = _pods(cluster, ns, f"{selector},jobset.sigs.k8s.io/replicatedjob-name=dataset-initializer")
    _show("TrainJob", initializer + nodes, (f"{TRAINER}/", "jobset.sigs.k8s.io/", COMPLETION_INDEX))
    assert sorted(p.metadata.labels[COMPLETION_INDEX] for p in nodes) == ["0", "1"]
    for pod in nodes:
        labels = pod.metadata.labels
        assert labels["jobset.sigs.k8s.io/job-global-index"] == "1"  # after the initializer's Job
        assert labels["jobset.sigs.k8s.io/jobset-uid"] == jobset["metadata"]["uid"]
        assert pod.spec.containers[0].resources.limits[GPU] == "4"
    # The runtime's step label is on the Jobs (replicatedJob template metadata), not on the pods:
    # no trainer.kubeflow.org key reaches a pod; the JobSet's name and owner lead to the TrainJob.
    assert not [k for p in initializer + nodes for k in {**p.metadata.labels, **(p.metadata.annotations or {})}
                if k.startswith(f"{TRAINER}/")]
    jobs = BatchV1Api(cluster.core.api_client).list_namespaced_job(ns).items
    assert {j.metadata.name: j.metadata.labels[f"{TRAINER}/trainjob-ancestor-step"] for j in jobs} == {
        "multi-step-dataset-initializer-0": "dataset-initializer", "multi-step-node-0": "trainer"}
    _delete(cluster, ns, TRAINJOB, "multi-step")


def _get(custom: CustomObjectsApi, ns: str, resource: tuple[str, str, str], name: str) -> dict[str, Any] | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return custom.get_namespaced_custom_object(resource[0], resource[1], ns, resource[2], name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
