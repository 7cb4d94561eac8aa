"""The starvation bound (core/gangs/starvation.py): a gang that has lacked room for
``gangs.starvation_seconds`` drains the domain where it fits once the running pods finish, so
smaller gangs that arrive later no longer take the GPUs it waits for. The real service, an
in-memory Binder, a manual clock.

    rack r1:  nvl n1: a1 a2     nvl n2: b1 b2      (8 GPUs each)

``run-a`` and ``run-b`` (8 GPUs, bound on a1 and b1) run; ``big`` needs 2 x 8 GPUs within one
NVLink domain, which no domain has free until a run finishes.
"""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry

from extender import topotext
from extender.adapters.metrics import Metrics
from extender.core.gangs.book import REPLAN_SECONDS, SHORT_OF_ROOM_SECONDS
from extender.core.gangs.starvation import DRAIN
from extender.settings import GangSettings, Settings
from tests.service.test_live import Clock, Extender, MemoryBinder
from tests.topologies import gang, pod

DRAWING = """
block b1
  rack r1
    nvl n1: a1[8/8] a2[8/8]
    nvl n2: b1[8/8] b2[8/8]
"""
NODES = ["a1", "a2", "b1", "b2"]
NVLINK = {"railyard.io/required-topology": "nvlink"}


def cluster(starvation: float):
    binder, clock = MemoryBinder(), Clock()
    ext = Extender(Settings(gangs=GangSettings(settle_seconds=0, starvation_seconds=starvation)), binder, clock=clock)
    ext.relisted("nodes", topotext.load(DRAWING).nodes)
    running = [pod("run-a", 8, node="a1"), pod("run-b", 8, node="b1")]
    ext.relisted("pods", running)
    ext.relisted("podgroups", [])
    return ext, clock, running


def big():
    return gang("big", 2, 8, annotations={"railyard.io/min-member": "2", **NVLINK})


BUSY = {"a1", "b1"}
"""Nodes whose GPUs bound pods use: kube-scheduler's own NodeResourcesFit leaves them out of the
NodeNames it sends (railyard's reservations it does not know)."""


def sent(busy) -> list[str]:
    return [n for n in NODES if n not in busy]


def planned(ext, pods, busy=BUSY) -> list[str]:
    """Create and filter every member; the one node each may go to ([] where it may go nowhere)."""
    for p in pods:
        ext.pod_upserted(p)
    return [n for p in pods for n in ext.filter(p, sent(busy)).node_names]


def finish(ext, p):
    done = {**p, "status": {"phase": "Succeeded"}}
    ext.pod_upserted(done)


def test_members_retried_after_one_change_share_one_plan_a_change_or_time_plans_again():
    """kube-scheduler retries every member of a gang that lost its plan after each change of the
    cluster: the first one's plan answers the others, until something the plan reads changes;
    while no domain has the free GPUs at all, until GPUs free or its numbers are 5 s old."""
    ext, clock, running = cluster(starvation=0)
    metrics = Metrics(CollectorRegistry())
    ext.ctx.ports = dataclasses.replace(ext.ctx.ports, observer=metrics)

    def plans() -> float:
        return metrics.registry.get_sample_value("railyard_plan_duration_seconds_count")

    first, second = members = big()
    for p in members:
        ext.pod_upserted(p)
    assert ext.filter(first, sent(BUSY)).node_names == ()
    reason = ext.debug_gangs()[0].reason
    assert "needs 2 pods x 8 GPUs" in reason and plans() == 1
    verdict = ext.filter(second, sent(BUSY))
    assert verdict.node_names == () and verdict.failed == dict.fromkeys(sent(BUSY), reason) and plans() == 1

    assert ext.filter(second, sent(BUSY | {"b2"})).node_names == () and plans() == 2, "other nodes refused"
    ext.pod_upserted(pod("lone", 1, node="b2"))  # a pod holding GPUs changes the cluster
    assert ext.filter(first, sent(BUSY)).node_names == () and plans() == 3
    assert ext.filter(second, sent(BUSY)).node_names == () and plans() == 3
    clock.now += REPLAN_SECONDS
    ext.pod_upserted(pod("lone-2", 1, node="a2"))
    assert ext.filter(first, sent(BUSY)).node_names == () and plans() == 3, "GPUs taken: still no room"
    assert ext.debug_gangs()[0].reason == reason
    clock.now += SHORT_OF_ROOM_SECONDS - REPLAN_SECONDS
    assert ext.filter(first, sent(BUSY)).node_names == () and plans() == 4, "its numbers 5 s old"

    # GPUs free where the gang still cannot go (kube-scheduler left b2 out): a plan each change.
    for p in (pod("lone", 1, node="b2"), pod("lone-2", 1, node="a2")):
        ext.pod_deleted(p)
    finish(ext, running[1])
    assert ext.filter(first, sent({"a1", "b2"})).node_names == () and plans() == 5
    ext.pod_upserted(pod("lone-3", 1, node="a2"))
    assert ext.filter(first, sent({"a1", "b2"})).node_names == () and plans() == 6, "room on b1, b2 counted"

    ext.pod_deleted(pod("lone-3", 1, node="a2"))
    finish(ext, running[0])
    assert sorted(n for p in members for n in ext.filter(p, sent({"b1"})).node_names) == ["a1", "a2"]
    assert plans() == 7


def test_the_starvation_bound_and_the_drains_hold_are_not_late_while_a_gang_lacks_room():
    """A gang that lacks room is not planned again on every change for 5 s, but its drain begins
    at the bound, and is held again before half its hold runs out (a bound of 4 s here)."""
    ext, clock, _ = cluster(starvation=4)
    members = big()
    assert planned(ext, members) == []
    clock.now += 4.5
    ext.pod_upserted(pod("lone", 1, node="b2"))
    assert planned(ext, members) == []
    assert ext.ctx.state.reservations()[f"ml/big{DRAIN}"].deadline == clock.now + 4, "drained at the bound"
    for step in range(8):  # something changes every second
        clock.now += 1
        ext.pod_upserted(pod("lone", 1 + step % 2, node="b2"))
        assert planned(ext, members) == []
        drain = ext.ctx.state.reservations().get(f"ml/big{DRAIN}")
        assert drain is not None and drain.deadline - clock.now >= 2, (step, drain)


def test_without_the_bound_a_later_small_gang_takes_the_gpus_a_starving_gang_waits_for():
    ext, clock, _ = cluster(starvation=0)
    assert planned(ext, big()) == []
    clock.now += 120
    assert planned(ext, big()) == []
    assert planned(ext, gang("small", 1, 8, annotations=NVLINK)) in (["a2"], ["b2"])
    assert DRAIN not in "".join(ext.ctx.state.reservations())


def test_past_the_bound_the_starving_gang_drains_a_domain_and_binds_there_once_it_frees():
    ext, clock, running = cluster(starvation=60)
    assert planned(ext, big()) == []
    clock.now += 59
    assert planned(ext, big()) == [] and DRAIN not in "".join(ext.ctx.state.reservations()), "drained before the bound"
    clock.now += 2
    assert planned(ext, big()) == []
    drain = ext.ctx.state.reservations()[f"ml/big{DRAIN}"]
    domain = {s.node for s in drain.slots}
    assert domain in ({"a1", "a2"}, {"b1", "b2"}) and drain.gpus == 16
    reason = ext.debug_gangs()[0].reason
    assert reason.endswith(
        f"; gang ml/big has lacked room for 61s (starvation bound 60s, gangs.starvation_seconds): 16 GPUs on 2 "
        f"nodes where it fits once their pods finish ({', '.join(sorted(domain))}) are held for it; no other gang "
        f"or GPU pod is placed on them"), reason

    # A smaller gang that arrives now cannot take the drained domain's free node; the other one it may.
    free_node = ({"a2", "b2"} & domain).pop()
    other_free = ({"a2", "b2"} - domain).pop()
    assert free_node != other_free
    assert list(ext.filter(pod("single", 4), sent(BUSY)).node_names) == [other_free]  # a GPU pod of no gang too
    assert planned(ext, gang("small", 1, 8, annotations=NVLINK)) == [other_free]

    # The drain stays where it is while the gang keeps asking.
    clock.now += 30
    assert planned(ext, big()) == [] and {s.node for s in ext.ctx.state.reservations()[f"ml/big{DRAIN}"].slots} == domain
    # The run in the drained domain finishes: the starving gang is planned there, whole.
    done = next(p for p in running if p["spec"]["nodeName"] in domain)
    finish(ext, done)
    assert sorted(planned(ext, big(), busy=BUSY - {done["spec"]["nodeName"]})) == sorted(domain)
    assert f"ml/big{DRAIN}" not in ext.ctx.state.reservations()


def test_a_gang_too_large_for_any_domain_even_drained_drains_nothing():
    ext, clock, _ = cluster(starvation=60)
    giant = gang("giant", 3, 8, annotations={"railyard.io/min-member": "3", **NVLINK})
    assert planned(ext, giant) == []
    clock.now += 120
    assert planned(ext, giant) == []
    assert ext.ctx.state.reservations() == {}
    assert planned(ext, gang("small", 1, 8, annotations=NVLINK)) in (["a2"], ["b2"])


def test_a_drain_whose_gang_stops_asking_lapses_after_the_bound():
    ext, clock, _ = cluster(starvation=60)
    members = big()
    planned(ext, members)
    clock.now += 61
    planned(ext, members)
    assert f"ml/big{DRAIN}" in ext.ctx.state.reservations()
    for p in members:
        ext.pod_deleted(p)
    clock.now += 61
    assert planned(ext, gang("small", 2, 8, annotations={"railyard.io/min-member": "2"})) != []
    assert f"ml/big{DRAIN}" not in ext.ctx.state.reservations()


def test_a_drain_is_planned_on_the_cluster_as_it_will_be_not_around_other_gangs_short_plans():
    # Two small gangs hold plans on a2 and b2 (about to bind, then to run and finish like the
    # others): counting them would leave no domain for the drain, or scatter it.
    ext, clock, _ = cluster(starvation=60)
    assert planned(ext, big()) == []
    clock.now += 61
    assert sorted(planned(ext, gang("s1", 1, 8, annotations=NVLINK)) + planned(ext, gang("s2", 1, 8, annotations=NVLINK))) == ["a2", "b2"]
    assert planned(ext, big()) == []
    drain = ext.ctx.state.reservations()[f"ml/big{DRAIN}"]
    assert {s.node for s in drain.slots} in ({"a1", "a2"}, {"b1", "b2"})


def test_drains_go_by_age_the_oldest_starving_gang_takes_a_younger_ones_drain():
    # Only nvl n1 ever holds a 2 x 8 GPU gang. The younger starving gang drains it first; the
    # older one, asking next, takes it over; the younger one then drains nothing and waits behind.
    drawing = "block b1\n  rack r1\n    nvl n1: a1[8/8] a2[8/8]\n    nvl n2: b1[8/8]\n"
    binder, clock = MemoryBinder(), Clock()
    ext = Extender(Settings(gangs=GangSettings(settle_seconds=0, starvation_seconds=60)), binder, clock=clock)
    ext.relisted("nodes", topotext.load(drawing).nodes)
    ext.relisted("pods", [pod("run-a", 8, node="a1")])
    ext.relisted("podgroups", [])
    names = ["a2", "b1"]  # a1 is busy: kube-scheduler leaves it out

    def ask(name):
        members = gang(name, 2, 8, annotations={"railyard.io/min-member": "2", **NVLINK})
        for p in members:
            ext.pod_upserted(p)
        return [n for p in members for n in ext.filter(p, names).node_names]

    assert ask("old") == []
    clock.now += 10
    assert ask("young") == []
    clock.now += 65
    assert ask("young") == []
    assert {s.node for s in ext.ctx.state.reservations()[f"ml/young{DRAIN}"].slots} == {"a1", "a2"}
    assert ask("old") == []
    assert {s.node for s in ext.ctx.state.reservations()[f"ml/old{DRAIN}"].slots} == {"a1", "a2"}
    assert f"ml/young{DRAIN}" not in ext.ctx.state.reservations()
    assert ask("young") == [] and f"ml/young{DRAIN}" not in ext.ctx.state.reservations()
    reason = next(g.reason for g in ext.debug_gangs() if g.gang == "ml/young")
    assert "lacked room" not in reason, reason


# A drained gang lands where it drained, not a moment earlier in a wider domain (issue 23: a
# 2-node gang that preferred one NVLink domain bound across two leaves 0.8 s before the domain
# drained for it freed).
#
#   rack r1:  nvl n1: a1 a2      rack r2:  nvl n2: b1      rack r3:  nvl n3: c1
THREE_RACKS = """
block b1
  rack r1
    nvl n1: a1[8/8] a2[8/8]
  rack r2
    nvl n2: b1[8/8]
  rack r3
    nvl n3: c1[8/8]
"""
EVERY = ["a1", "a2", "b1", "c1"]


def full(drawing: str, settings: GangSettings):
    """Every node runs an 8-GPU pod; ``wide`` (2 x 8 GPUs, no topology request) has drained nvl
    n1, the one domain narrower than the cluster that holds it."""
    clock = Clock()
    ext = Extender(Settings(gangs=settings), MemoryBinder(), clock=clock)
    ext.relisted("nodes", topotext.load(drawing).nodes)
    running = {n: pod(f"run-{n}", 8, node=n) for n in EVERY}
    ext.relisted("pods", list(running.values()))
    ext.relisted("podgroups", [])
    members = gang("wide", 2, 8, annotations={"railyard.io/min-member": "2"})
    assert ask(ext, members, set(EVERY)) == []
    clock.now += 61
    assert ask(ext, members, set(EVERY)) == []
    return ext, clock, running, members


def ask(ext, members, busy) -> list[str]:
    for p in members:
        ext.pod_upserted(p)
    return sorted(n for p in members for n in ext.filter(p, [n for n in EVERY if n not in busy]).node_names)


def drained(ext) -> set[str]:
    drain = ext.ctx.state.reservations().get(f"ml/wide{DRAIN}")
    return {s.node for s in drain.slots} if drain is not None else set()


def test_a_drained_gang_waits_for_its_domain_while_only_a_wider_one_holds_it():
    ext, clock, running, members = full(THREE_RACKS, GangSettings(settle_seconds=0, starvation_seconds=60))
    assert drained(ext) == {"a1", "a2"}
    finish(ext, running["b1"])
    finish(ext, running["c1"])
    clock.now += 5
    assert ask(ext, members, {"a1", "a2"}) == [], "took b1 and c1, across two racks"
    assert drained(ext) == {"a1", "a2"}
    reason = ext.debug_gangs()[0].reason
    assert reason.startswith(
        "gang ml/wide waits for the GPUs held for it in nvlink b1/r1/n1, 16 of 16 still in use, though it fits now "
        "within "), reason
    assert "it takes that wider domain if they are not free in 294s (gangs.max_preferred_wait_seconds)" in reason, reason
    finish(ext, running["a1"])
    assert ask(ext, members, {"a2"}) == [] and "8 of 16 still in use" in ext.debug_gangs()[0].reason
    finish(ext, running["a2"])
    assert ask(ext, members, set()) == ["a1", "a2"]
    assert drained(ext) == set()


def test_a_drained_gang_takes_the_wider_domain_once_its_patience_is_spent():
    ext, clock, running, members = full(THREE_RACKS, GangSettings(settle_seconds=0, starvation_seconds=60,
                                                           max_preferred_wait_seconds=100))
    finish(ext, running["b1"])
    finish(ext, running["c1"])
    for _ in range(3):  # kube-scheduler sends the members back while they wait
        clock.now += 32
        assert ask(ext, members, {"a1", "a2"}) == []
    clock.now += 2  # 159 s unplaced: 60 s to the drain, 99 s of its 100 s patience
    assert ask(ext, members, {"a1", "a2"}) == []
    clock.now += 2
    assert ask(ext, members, {"a1", "a2"}) == ["b1", "c1"]
    assert drained(ext) == set()


def test_a_drained_gang_takes_a_narrower_domain_that_frees_elsewhere():
    # a2 is cordoned when the gang drains: nvl n1 cannot hold it, so the drain is leaf r2's two
    # NVLink domains. Once a2 is back and n1 frees, the gang takes n1 rather than its drain.
    two_nvl = THREE_RACKS.replace("  rack r2\n    nvl n2: b1[8/8]\n  rack r3\n    nvl n3: c1[8/8]\n",
                                  "  rack r2\n    nvl n2: b1[8/8]\n    nvl n3: c1[8/8]\n")
    ext, clock, running, members = full(two_nvl.replace("a2[8/8]", "a2[8/8 cordoned]"),
                                 GangSettings(settle_seconds=0, starvation_seconds=60))
    assert drained(ext) == {"b1", "c1"}
    ext.relisted("nodes", topotext.load(two_nvl).nodes)
    for n in EVERY:
        finish(ext, running[n])
    assert ask(ext, members, set()) == ["a1", "a2"]
    assert drained(ext) == set()
