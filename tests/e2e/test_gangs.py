"""Gangs on the real kube-scheduler through railyard: bound whole or not at all, never deadlocked.

One cluster for the module (``cluster up`` with the extender), 20 kwok nodes x 8 GPUs::

    block b1
      rack r1: nvl n1 (5 nodes)  nvl n2 (5 nodes)
      rack r2: nvl n1 (5 nodes)  nvl n2 (5 nodes)

Every test runs in its own namespace with a ``BindingWatch`` listing its pods every 0.2 s from
before the first pod is created: a gang seen partly bound for more than 2 s, or left partly
bound, fails the test whatever else it asserts. Pods are deleted (grace 0) after each test.
"""

from __future__ import annotations

import re
import time
from itertools import zip_longest
from typing import Any, Iterable

import pytest

from extender.adapters.kubeobjects import GATE

from .helpers import (
    BindingWatch, create_pods, delete_pods, gang_pods, gpu_pod, names_of, namespace, node_labels, unique,
    wait_for, wait_for_phase, wait_gang_reason, wait_released,
)

pytestmark = pytest.mark.e2e

TOPOLOGY = "blocks=1 racks=2 nvl=2 nodes=5 gpus=8 scheme=topograph"
NODES = 20
LEAF = "network.topology.nvidia.com/leaf"
NVLINK = "network.topology.nvidia.com/accelerator"
#: Generous: other clusters share these 2 cores.
BIND_TIMEOUT = 150


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(topology=TOPOLOGY, extender=True)


@pytest.fixture
def ns(cluster):
    name = namespace(cluster.core)
    yield name
    delete_pods(cluster.core, name)
    wait_released(cluster, name)


@pytest.fixture
def watch(cluster, ns):
    with BindingWatch(cluster.core, ns) as w:
        yield w
        w.assert_whole()  # every gang the test made, whatever the test asserted itself


def interleaved(*gangs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Members of several gangs in the order controllers would create them side by side."""
    return [p for group in zip_longest(*gangs) for p in group if p is not None]


def gang_phase(cluster, ns: str, gang: str) -> str:
    return cluster.extender_gangs().get(f"{ns}/{gang}", {}).get("phase", "")


def domains(labels: dict[str, dict[str, str]], nodes: Iterable[str], *keys: str) -> set[tuple[str, ...]]:
    """The distinct (key1 value, key2 value, ...) the nodes carry: one element = one domain."""
    return {tuple(labels[n].get(k, "") for k in keys) for n in nodes}


# -- a -----------------------------------------------------------------------------------------

def test_three_gangs_bind_whole_each_in_one_nvlink_domain_or_rack(cluster, ns, watch):
    core = cluster.core
    gangs = {
        "four": gang_pods("four", 4, required="nvlink"),
        "eight": gang_pods("eight", 8),  # no NVLink domain holds 8: one rack does
        "five": gang_pods("five", 5, required="nvlink"),  # exactly one NVLink domain
    }
    create_pods(core, ns, interleaved(*gangs.values()))
    members = {g: names_of(p) for g, p in gangs.items()}
    for gang, names in members.items():
        watch.wait_bound(names, BIND_TIMEOUT, f"gang {gang}")
    watch.assert_whole(members)

    everyone = [n for names in members.values() for n in names]
    running = wait_for_phase(core, ns, everyone, "Running", timeout=60)
    placed = {n: pod.spec.node_name for n, pod in running.items()}
    assert len(set(placed.values())) == len(everyone), "8-GPU pods must not share a node"
    labels = node_labels(core)
    for gang in ("four", "five"):
        assert len(domains(labels, [placed[n] for n in members[gang]], LEAF, NVLINK)) == 1, (gang, placed)
    assert len(domains(labels, [placed[n] for n in members["eight"]], LEAF)) == 1, placed


# -- b -----------------------------------------------------------------------------------------

def test_gang_larger_than_any_nvlink_domain_stays_pending_whole_with_the_reason(cluster, ns, watch):
    core = cluster.core
    giant = gang_pods("giant", 6, required="nvlink")
    names = create_pods(core, ns, giant)
    reason = re.compile(rf"gang {ns}/giant needs 6 pods x 8 GPUs within one {re.escape(NVLINK)}; "
                        rf"best nvlink \S+ fits 5")
    for name in names:
        message = wait_gang_reason(core, ns, name, timeout=BIND_TIMEOUT)
        assert reason.search(message), message
    # Every member waits gated (kube-scheduler never tries one); none is bound, now or a moment later.
    assert all(GATE in [g.name for g in p.spec.scheduling_gates or []] for p in core.list_namespaced_pod(ns).items)
    assert watch.bound(names) == {}
    time.sleep(3)
    assert watch.bound(names) == {}
    assert all(p.status.phase == "Pending" for p in core.list_namespaced_pod(ns).items)
    watch.assert_whole({"giant": names})


# -- c -----------------------------------------------------------------------------------------

def test_two_gangs_of_60_percent_one_binds_then_the_other_no_deadlock(cluster, ns, watch):
    core = cluster.core
    size = NODES * 6 // 10
    east = gang_pods("east", size, sim_runtime="15s")
    west = gang_pods("west", size, sim_runtime="15s")
    create_pods(core, ns, interleaved(east, west))
    members = {"east": names_of(east), "west": names_of(west)}

    def one_whole() -> str | None:
        return next((g for g, names in members.items() if len(watch.bound(names)) == len(names)), None)

    first = wait_for(one_whole, BIND_TIMEOUT, "one of the two gangs to bind whole")
    second = "west" if first == "east" else "east"
    assert watch.bound(members[second]) == {}, "the second gang must hold nothing while the first runs"
    watch.assert_whole(members)

    finished = wait_for_phase(core, ns, members[first], "Succeeded", timeout=BIND_TIMEOUT)
    assert len(finished) == size
    watch.wait_bound(members[second], BIND_TIMEOUT, f"gang {second} after {first} finished")
    watch.assert_whole(members)
    # The second gang bound only after the first had finished (both seen in one listing at most).
    assert min(watch.first_seen(members[second])) >= min(watch.first_seen(members[first], "Succeeded"))


# -- d -----------------------------------------------------------------------------------------

def test_gang_whose_last_member_comes_20s_late_binds_whole_once_complete(cluster, ns, watch):
    core = cluster.core
    late = gang_pods("late", 4)
    names = names_of(late)
    create_pods(core, ns, late[:3])
    started = time.monotonic()
    wait_for(lambda: gang_phase(cluster, ns, "late") == "waiting at bind 3/4", BIND_TIMEOUT,
             "three members held at bind")
    while time.monotonic() - started < 20:
        assert watch.bound(names) == {}, "a member was bound before the gang was complete"
        time.sleep(0.5)
    create_pods(core, ns, late[3:])
    completed = time.monotonic()
    watch.wait_bound(names, BIND_TIMEOUT, "the gang once its last member exists")
    watch.assert_whole({"late": names})
    assert min(watch.first_seen(names)) >= completed
    wait_for_phase(core, ns, names, "Running")


# -- e: the extender killed while members wait at bind: tests/e2e/test_failover.py (the fault matrix)

# -- f -----------------------------------------------------------------------------------------

def test_single_gpu_pods_keep_being_scheduled_while_gangs_wait(cluster, ns, watch):
    core = cluster.core
    giant = gang_pods("giant", 6, required="nvlink")  # can never fit: waits whole
    partial = gang_pods("partial", 4, timeout_seconds=100)  # 3 of 4 created: held at bind
    create_pods(core, ns, giant + partial[:3])
    wait_for(lambda: gang_phase(cluster, ns, "partial") == "waiting at bind 3/4", BIND_TIMEOUT,
             "three members of the partial gang held at bind")
    plan = cluster.extender_gangs()[f"{ns}/partial"]["plan"]
    held = {plan[f"{ns}/{n}"] for n in names_of(partial)[:3]}

    # Half on the reference configuration's profile for single pods (kube-scheduler's sample of
    # the nodes, not every one). Neither reaches railyard (tests/e2e/test_lone_pods.py): the
    # members held at bind keep their nodes in kube-scheduler's own cache; the slot kept for the
    # member not created yet is railyard's alone (docs/reference.md, "Reservations kube-scheduler
    # can see").
    singles = create_pods(core, ns, [gpu_pod(unique("single"), gpus, scheduler_name=profile)
                                     for gpus in (1, 2, 4, 8) for profile in (None, "railyard-sampled")])
    running = wait_for_phase(core, ns, singles, "Running", timeout=BIND_TIMEOUT)
    assert not held & {p.spec.node_name for p in running.values()}, "a single pod took a held member's node"
    gangs = {"giant": names_of(giant), "partial": names_of(partial)}
    assert watch.bound(gangs["giant"] + gangs["partial"]) == {}

    create_pods(core, ns, partial[3:])
    watch.wait_bound(gangs["partial"], BIND_TIMEOUT, "the partial gang once complete")
    watch.assert_whole(gangs)
    assert watch.bound(gangs["giant"]) == {}


# -- a member replaced while its gang runs -------------------------------------------------------

def test_replacement_for_a_deleted_member_of_a_running_gang_binds(cluster, ns, watch):
    # What a Job or JobSet controller does after a pod is lost: the running members count
    # toward min-member, so the replacement is not held for members that will never come.
    core = cluster.core
    job = gang_pods("job", 4, timeout_seconds=20)
    names = create_pods(core, ns, job)
    watch.wait_bound(names, BIND_TIMEOUT, "the gang")
    wait_for_phase(core, ns, names, "Running")
    core.delete_namespaced_pod(names[2], ns, grace_period_seconds=0)
    wait_for(lambda: names[2] not in {p.metadata.name for p in core.list_namespaced_pod(ns).items}, 60,
             f"{names[2]} to be gone")
    create_pods(core, ns, [gang_pods("job", 4, timeout_seconds=20)[2]])
    running = wait_for_phase(core, ns, names, "Running", timeout=BIND_TIMEOUT)
    assert len({p.spec.node_name for p in running.values()}) == 4


# -- a member deleted while its gang waits at bind -------------------------------------------------

def test_member_deleted_while_gang_waits_at_bind_releases_then_gang_binds_whole(cluster, ns, watch):
    core = cluster.core
    gang = gang_pods("held", 4, timeout_seconds=100)
    names = names_of(gang)
    create_pods(core, ns, gang[:1])  # planned with three placeholder slots ...
    wait_for(lambda: gang_phase(cluster, ns, "held") == "waiting at bind 1/4", BIND_TIMEOUT, "first member held")
    create_pods(core, ns, gang[1:3])  # ... which the next two members take
    wait_for(lambda: gang_phase(cluster, ns, "held") == "waiting at bind 3/4", BIND_TIMEOUT, "three members held")
    core.delete_namespaced_pod(names[2], ns, grace_period_seconds=0)
    # Released at once (not at the 100 s deadline): the two left are planned and held again.
    wait_for(lambda: gang_phase(cluster, ns, "held") == "waiting at bind 2/4", 60,
             "the gang released and its two members held again")
    assert watch.bound(names) == {}
    create_pods(core, ns, [gang_pods("held", 4, timeout_seconds=100)[2], gang[3]])
    watch.wait_bound(names, BIND_TIMEOUT, "the gang once complete again")
    watch.assert_whole({"held": names})
