"""Fault matrix, processes (docs/faults.md): railyard killed while members wait at bind and in the
middle of a Binding burst, and a leader failover of the HA shape of the manifests, on the real
local cluster.

One cluster for the module: ``cluster up --replicas 2`` (two kube-schedulers electing a leader
on Lease kube-system/railyard-scheduler, each with its own railyard), 10 kwok nodes x 8 GPUs::

    block b1 / rack r1:  nvl n1 (5 nodes)  nvl n2 (5 nodes)

with ``gangs.binding_pause_seconds: 2`` (a gang's Bindings go out one by one, 2 s apart, so a
kill lands between two of them) and ``gangs.recovery_grace_seconds: 3``. Every test watches its
namespace with a ``BindingWatch`` and ends with 0 gangs left partly bound. The measured seconds
are printed (``-s``) as ``fault-figure <row>: ...``; docs/faults.md quotes them.
"""

from __future__ import annotations

import time

import pytest

from extender.localcluster import replicas

from .helpers import BindingWatch, create_pods, delete_pods, gang_pods, names_of, namespace, wait_for

pytestmark = pytest.mark.e2e

TOPOLOGY = "blocks=1 racks=1 nvl=2 nodes=5 gpus=8 scheme=topograph"
PAUSE = 2
GRACE = 3
#: The issue's bound: a gang left mid-burst ends whole within this long of the new railyard being ready.
RECOVERY_BOUND = 30
#: Bindings 2 s apart plus recovery: how long a gang of 4 may be seen partly bound here.
MAX_SPREAD = 4 * PAUSE + RECOVERY_BOUND


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(topology=TOPOLOGY, extender=True, replicas=2,
                         extender_settings={"gangs.binding_pause_seconds": PAUSE,
                                            "gangs.recovery_grace_seconds": GRACE})


@pytest.fixture
def ns(cluster):
    name = namespace(cluster.core)
    yield name
    delete_pods(cluster.core, name)


def events(core, ns: str, reason: str) -> list:
    return [e for e in core.list_namespaced_event(ns).items if e.reason == reason]


def phase(cluster, replica: int, ns: str, gang: str) -> str:
    return cluster.extender_gangs(replica).get(f"{ns}/{gang}", {}).get("phase", "")


def whole(watch: BindingWatch, core, ns: str, names: list[str]) -> str | None:
    """"completed" when every member is bound, "undone" when none is and some were evicted."""
    watch.poll()
    bound = watch.bound_now(names)
    if len(bound) == len(names):
        return "completed"
    alive = {p.metadata.name for p in core.list_namespaced_pod(ns).items}
    if not bound and set(names) - alive:
        return "undone"
    return None


def _failed_scheduling(core, ns: str, name: str) -> bool:
    """The pod's PodScheduled condition is False: the attempt that was held at bind failed."""
    pod = core.read_namespaced_pod(name, ns)
    return any(c.type == "PodScheduled" and c.status == "False" for c in pod.status.conditions or [])


def test_extender_killed_while_members_wait_then_restarted_binds_whole(cluster, ns):
    core = cluster.core
    lead = replicas.leader(cluster.workdir)
    crash = gang_pods("crash", 4, timeout_seconds=100)
    names = names_of(crash)
    with BindingWatch(core, ns) as watch:
        create_pods(core, ns, crash[:3])
        wait_for(lambda: phase(cluster, lead["index"], ns, "crash") == "waiting at bind 3/4", 120,
                 "three members held at bind")
        replicas.kill(cluster.workdir, lead["index"], ("extender",))
        killed = time.monotonic()
        # The scheduler's held bind calls fail with the connection; it retries against the dead extender.
        for name in names[:3]:
            wait_for(lambda n=name: _failed_scheduling(core, ns, n), 60, f"{name}: the scheduler to see the failure")
        assert watch.bound(names) == {}, "a member was bound while the extender was down"

        replicas.restart(cluster.workdir, lead["index"], ("extender",))
        ready = time.monotonic()
        wait_for(lambda: phase(cluster, lead["index"], ns, "crash") == "waiting at bind 3/4", 60,
                 "the restarted railyard to plan the gang again and hold three members at bind")
        held = time.monotonic()
        assert watch.bound(names) == {}, "a member was bound before the gang was complete"

        create_pods(core, ns, crash[3:])
        watch.wait_bound(names, 120, "the gang after the restart")
        watch.assert_whole({"crash": names}, max_spread=MAX_SPREAD)
        watch.assert_none_partial_now({"crash": names})
        print(f"\nfault-figure extender SIGKILL while members wait: 0/4 bound while it was down; held again "
              f"{held - ready:.1f}s after the new railyard was ready ({held - killed:.1f}s after the kill), "
              f"bound whole once complete; 0 pods left partial")


def test_extender_killed_mid_burst_gang_ends_whole(cluster, ns):
    core = cluster.core
    lead = replicas.leader(cluster.workdir)
    gang = gang_pods("burst", 4, timeout_seconds=60)
    names = names_of(gang)
    with BindingWatch(core, ns, interval=0.1) as watch:
        create_pods(core, ns, gang)
        watch.wait_bound(names[:1], 120, "the first Binding of the burst")
        replicas.kill(cluster.workdir, lead["index"], ("extender",))
        killed = time.monotonic()
        time.sleep(1)
        watch.poll()
        at_kill = len(watch.bound_now(names))
        assert 0 < at_kill < len(names), f"the kill must land inside the burst: {at_kill}/{len(names)} bound"

        replicas.restart(cluster.workdir, lead["index"], ("extender",))
        ready = time.monotonic()
        how = wait_for(lambda: whole(watch, core, ns, names), RECOVERY_BOUND, "the gang to end whole", interval=0.1)
        ended = time.monotonic()
        watch.assert_none_partial_now({"burst": names})
        via = ("from the marks (GangCompleted)" if events(core, ns, "GangCompleted") else
               "by a new plan of the unbound members" if how == "completed" else "(GangCompensated)")
        print(f"\nfault-figure extender SIGKILL mid-burst: {at_kill}/4 bound at the kill; {how} {via} "
              f"{ended - ready:.1f}s after the new railyard was ready ({ended - killed:.1f}s after the kill); "
              f"0 pods left partial")
        if how == "completed":
            assert len(set(watch.bound_now(names).values())) == len(names)


def test_leader_failover_while_one_gang_waits_and_another_is_mid_burst(cluster, ns):
    core = cluster.core
    lead = replicas.leader(cluster.workdir)
    standby = next(r for r in replicas.replicas(cluster.workdir) if r["index"] != lead["index"])
    waiting = gang_pods("waits", 4, timeout_seconds=100)
    burst = gang_pods("burst", 4, timeout_seconds=60)
    a, b = names_of(waiting), names_of(burst)
    with BindingWatch(core, ns, interval=0.1) as watch:
        create_pods(core, ns, waiting[:3])
        wait_for(lambda: phase(cluster, lead["index"], ns, "waits") == "waiting at bind 3/4", 120,
                 "gang waits: three members held at the leader's railyard")
        create_pods(core, ns, burst)
        watch.wait_bound(b[:1], 120, "the first Binding of gang burst")
        replicas.kill(cluster.workdir, lead["index"])
        killed = time.monotonic()
        time.sleep(0.5)
        watch.poll()
        bound_at_kill = set(watch.bound_now(b))
        at_kill = len(bound_at_kill)
        assert 0 < at_kill < len(b), f"the kill must land inside gang burst's Bindings: {at_kill}/4 bound"
        assert watch.bound_now(a) == {}

        new = replicas.leader(cluster.workdir, timeout=60)
        assert new["index"] == standby["index"]
        led = time.monotonic()
        how = wait_for(lambda: whole(watch, core, ns, b), 60, "gang burst to end whole", interval=0.1)
        burst_whole = time.monotonic()
        wait_for(lambda: phase(cluster, new["index"], ns, "waits") == "waiting at bind 3/4", 60,
                 "gang waits held again at the new leader's railyard")
        waits_held = time.monotonic()
        assert watch.bound_now(a) == {}, "gang waits must hold nothing before it is complete"

        create_pods(core, ns, gang_pods("waits", 4, timeout_seconds=100)[3:])
        watch.wait_bound(a, 120, "gang waits once complete")
        watch.assert_none_partial_now({"waits": a, "burst": b})
        watch.assert_whole({"waits": a}, max_spread=MAX_SPREAD)
        print(f"\nfault-figure leader failover: new leader after {led - killed:.1f}s; gang burst "
              f"({at_kill}/4 bound at the kill) {how} {burst_whole - killed:.1f}s after the kill; gang waits "
              f"held again after {waits_held - killed:.1f}s and bound whole; 0 pods left partial")

    if how == "completed":
        # The standby's railyard saw the round partial while it stood by, and finished it.
        done = events(core, ns, "GangCompleted")
        assert done, "gang burst was completed without a GangCompleted Event"
        expected = (f"gang {ns}/burst: finished a Binding round its extender had left at {at_kill}/4 members bound: "
                    f"bound the other {4 - at_kill} to their planned nodes")
        assert all(e.message.startswith(expected) for e in done), [e.message for e in done]
        assert sorted(e.involved_object.name for e in done) == sorted(set(b) - bound_at_kill)

    # The killed pair rejoins as the standby; the new leader keeps leading.
    replicas.restart(cluster.workdir, lead["index"])
    time.sleep(2)
    assert replicas.leader(cluster.workdir)["index"] == new["index"]
