"""`cluster up --topology`, a second `up` on a running workdir, and `down` leaving nothing."""

from __future__ import annotations

import json
import time

import pytest

from extender.localcluster import processes

from .helpers import create_pods, delete_pods, gpu_pod, namespace, run_railyard, unique, wait_for_phase, wait_unschedulable

pytestmark = pytest.mark.e2e

TOPOLOGY = """\
block b1
  rack r1
    nvl n1: h1[2/8] h2[8/8 cordoned]
"""


def test_topology_cluster_then_down_leaves_nothing_running(local_cluster):
    cluster = local_cluster(topology=TOPOLOGY)
    core = cluster.core
    assert sorted(n.metadata.name for n in core.list_node().items) == ["h1", "h2"]
    h2 = core.read_node("h2")
    assert h2.spec.unschedulable is True
    assert h2.metadata.labels["network.topology.nvidia.com/accelerator"] == "n1"

    # h1[2/8]: a filler pod holds 6 GPUs, so 2 fit and a third does not.
    fill = core.read_namespaced_pod("fill-h1", "railyard-fill")
    assert fill.spec.node_name == "h1"
    assert wait_for_phase(core, "railyard-fill", ["fill-h1"], "Running")
    ns = namespace(core)
    (two,) = create_pods(core, ns, [gpu_pod(unique("two"), 2)])
    assert wait_for_phase(core, ns, [two], "Running")[two].spec.node_name == "h1"
    (more,) = create_pods(core, ns, [gpu_pod(unique("more"), 1)])
    assert "Insufficient nvidia.com/gpu" in wait_unschedulable(core, ns, more)
    delete_pods(core, ns)

    # A second `up` on a live workdir is refused and leaves the running cluster alone.
    again = run_railyard("cluster", "up", "--workdir", str(cluster.workdir), "--no-extender", check=False)
    assert again.returncode == 1
    assert "already running" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    running = processes.recorded(cluster.workdir)
    assert {p.name for p in running} == {"etcd", "kube-apiserver", "kwok", "kube-scheduler", "kube-controller-manager"}
    assert all(processes.is_alive(p) for p in running)

    cluster.railyard("down")
    assert not any(processes.is_alive(p) for p in running)
    assert processes.recorded(cluster.workdir) == []
    status = cluster.railyard("status", check=False)
    assert status.returncode == 1 and "no cluster" in status.stdout


def test_a_thousand_nodes_come_up_and_take_pods(local_cluster):
    """The issue's scale target on this 2-core machine: 1,024 nodes, no heartbeat load."""
    started = time.monotonic()
    cluster = local_cluster(topology="blocks=4 racks=8 nvl=4 nodes=8 gpus=8")
    up_seconds = time.monotonic() - started
    core = cluster.core
    nodes = core.list_node(_preload_content=False)
    assert len(json.loads(nodes.data)["items"]) == 1024
    assert up_seconds < 180, f"cluster up took {up_seconds:.0f}s"
    ns = namespace(core)
    names = create_pods(core, ns, [gpu_pod(unique("wide"), 8, sim_runtime="1s") for _ in range(32)])
    wait_for_phase(core, ns, names, "Succeeded", timeout=120)
    delete_pods(core, ns)
    cluster.railyard("down")
