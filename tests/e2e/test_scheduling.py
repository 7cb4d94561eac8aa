"""The real kube-scheduler places GPU pods on kwok nodes; kwok runs and finishes them.

All on the shared ``gpu_cluster`` (no extender): 4 schedulable 8-GPU nodes, one cordoned,
one tainted. Each test deletes its pods, so every test starts with all 32 GPUs free.
"""

from __future__ import annotations

import time

import pytest

from .helpers import (
    CORDONED, SCHEDULABLE, TAINT, TAINTED, create_pods, delete_pods, gpu_pod, namespace, pods_by_name, unique, wait_for_phase, wait_unschedulable,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def ns(gpu_cluster):
    name = namespace(gpu_cluster.core)
    yield name
    delete_pods(gpu_cluster.core, name)


def test_gpu_pods_run_then_succeed_after_their_sim_runtime(gpu_cluster, ns):
    core = gpu_cluster.core
    finishing = create_pods(core, ns, [gpu_pod(unique("short"), 4, sim_runtime="3s") for _ in range(2)])
    lasting = create_pods(core, ns, [gpu_pod(unique("long"), 2)])
    started = time.monotonic()
    running = wait_for_phase(core, ns, finishing + lasting, {"Running", "Succeeded"}, timeout=60)
    assert {p.spec.node_name for p in running.values()} <= set(SCHEDULABLE)
    done = wait_for_phase(core, ns, finishing, "Succeeded", timeout=60)
    assert time.monotonic() - started >= 3
    assert all(p.status.container_statuses[0].state.terminated.reason == "Completed" for p in done.values())
    # No annotation: the pod keeps running.
    assert pods_by_name(core, ns)[lasting[0]].status.phase == "Running"


def test_cordoned_and_tainted_nodes_never_get_pods(gpu_cluster, ns):
    core = gpu_cluster.core
    fits = create_pods(core, ns, [gpu_pod(unique("full"), 8) for _ in SCHEDULABLE])
    placed = wait_for_phase(core, ns, fits, "Running", timeout=60)
    assert sorted(p.spec.node_name for p in placed.values()) == sorted(SCHEDULABLE)

    (extra,) = create_pods(core, ns, [gpu_pod(unique("extra"), 1)])
    message = wait_unschedulable(core, ns, extra)
    assert "Insufficient nvidia.com/gpu" in message
    assert "unschedulable" in message and "untolerated taint" in message, message
    assert pods_by_name(core, ns)[extra].spec.node_name is None

    # The tainted node itself is fine: a pod that tolerates the taint lands there.
    tolerant = gpu_pod(unique("tolerant"), 8, tolerations=[{**TAINT, "operator": "Equal"}])
    (name,) = create_pods(core, ns, [tolerant])
    assert wait_for_phase(core, ns, [name], "Running")[name].spec.node_name == TAINTED
    assert CORDONED not in {p.spec.node_name for p in pods_by_name(core, ns).values()}


def test_succeeded_pods_free_their_gpus(gpu_cluster, ns):
    core = gpu_cluster.core
    first = create_pods(core, ns, [gpu_pod(unique("wave1"), 8, sim_runtime="2s") for _ in SCHEDULABLE])
    wait_for_phase(core, ns, first, "Succeeded", timeout=60)
    second = create_pods(core, ns, [gpu_pod(unique("wave2"), 8) for _ in SCHEDULABLE])
    wait_for_phase(core, ns, second, "Running", timeout=60)


def test_pods_naming_the_railyard_scheduler_are_scheduled_too(gpu_cluster, ns):
    core = gpu_cluster.core
    names = create_pods(core, ns, [gpu_pod(unique("named"), 1, scheduler_name="railyard")])
    pod = wait_for_phase(core, ns, names, "Running")[names[0]]
    assert pod.spec.node_name in SCHEDULABLE


def test_status_says_what_runs(gpu_cluster):
    result = gpu_cluster.railyard("status")
    for name in ("etcd", "kube-apiserver", "kwok", "kube-scheduler", "kube-controller-manager"):
        assert f"{name}" in result.stdout
    assert "controllers     job-controller, " in result.stdout
    assert "NOT running" not in result.stdout
    assert str(gpu_cluster.kubeconfig) in result.stdout
