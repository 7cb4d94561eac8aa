"""explain / plan_gang / watch_gangs: the live extender's answers behind the gRPC API."""

from __future__ import annotations

from extender.core.gangs import gangspec
from extender.core.placement.planner import domain_fits
from extender.service.answers import GangChange
from tests.service.test_live import NODES, bind_async, create, extender, steer, wait_until
from tests.topologies import TWO_RACKS, cluster, facts, gang


def test_domain_fits_lists_every_domain_at_the_required_level_best_first():
    spec = gangspec.build("ml/g", facts(gang("g", 4, 8, annotations={"railyard.io/required-topology": "nvlink"})),
                          None, 60.0)
    level, rows = domain_fits(spec, cluster(TWO_RACKS).state.view())
    assert level == 2
    assert [(r.domain.path, r.gpus, r.available, r.fits) for r in rows] == [
        (("b1", "r1", "n1"), 16, 16, 2),
        (("b1", "r1", "n2"), 16, 10, 1),
        (("b1", "r2", "n3"), 16, 8, 1),
    ]


def test_explain_a_waiting_gang_gives_its_numbers_and_leaves_the_reservation_alone():
    ext, _, clock = extender()
    pods = gang("g", 2, 8, annotations={"railyard.io/required-topology": "nvlink",
                                        "railyard.io/timeout-seconds": "30"})
    plan = steer(ext, pods)
    before = dict(ext.ctx.state.reservations())
    errors = {}
    t = bind_async(ext, pods[0], plan["ml/g-0"], errors)
    wait_until(lambda: ext.debug_gangs()[0].phase.startswith("waiting"))
    clock.now += 10
    got = ext.explain("ml/g-1")
    assert got.gang == "ml/g" and got.phase == "waiting"
    assert (got.at_bind, got.min_member, got.pods) == (1, 2, 2)
    assert got.deadline_in_seconds == 20.0
    assert got.plan == plan
    assert got.level == "network.topology.nvidia.com/accelerator"
    # Its own 16 GPUs are given back for the table: n1 holds the whole gang.
    row = got.fit[0]
    assert (row.domain.path, row.nodes, row.gpus, row.available, row.fits, row.blocked_nodes, row.slices) == (
        ("b1", "r1", "n1"), 2, 16, 16, 2, 0, 0)
    assert ext.ctx.state.reservations() == before
    clock.now += 30
    t.join(5)


def test_explain_an_unplaceable_gang_and_an_unknown_pod():
    ext, _, _ = extender()
    pods = gang("big", 3, 8, annotations={"railyard.io/required-topology": "nvlink"})
    create(ext, pods)
    ext.filter(pods[0], NODES)
    got = ext.explain("ml/big-2")
    assert got.phase == "pending"
    assert got.reason.startswith("gang ml/big needs 3 pods x 8 GPUs within one "
                                    "network.topology.nvidia.com/accelerator; best nvlink b1/r1/n1 fits 2")
    assert [r.fits for r in got.fit] == [2, 1, 1]
    assert ext.explain("ml/nobody") is None


def test_plan_gang_reserves_nothing():
    ext, _, _ = extender()
    answers = ext.plan_gang(gang("g", 2, 8))
    assert [(a.gang, a.feasible, sorted(a.placement.values())) for a in answers] == [("ml/g", True, ["h1", "h2"])]
    assert ext.ctx.state.reservations() == {}
    assert ext.plan_gang(gang("g", 9, 8))[0].feasible is False


def test_watch_gangs_lists_then_streams_each_transition_with_its_reason():
    ext, _, _ = extender()
    first = gang("a", 1, 8)
    steer(ext, first)
    seen = []
    listing, stop = ext.watch_gangs(seen.append)
    assert listing == [GangChange("ml/a", "planned", "", "", listing[0].reason, origin="")]  # no size declared
    pods = gang("g", 2, 8, annotations={"railyard.io/min-member": "2"})
    create(ext, pods)
    ext.filter(pods[0], NODES)
    ext.pod_deleted(pods[1])
    assert [(e.gang, e.previous, e.event, e.phase) for e in seen] == [
        ("ml/g", "", "", "pending"),
        ("ml/g", "pending", "planned", "planned"),
        ("ml/g", "planned", "member_lost", "pending"),
    ]
    assert seen[-1].reason == "member ml/g-1 was deleted while gang ml/g waited; planning again"
    assert {e.origin for e in seen} == {"size 2 from railyard.io/min-member"}
    stop()
    ext.filter(pods[0], NODES)
    assert len(seen) == 3


def test_explain_a_gang_kube_scheduler_never_sent_says_so_and_what_planning_would_give():
    ext, _, _ = extender()
    create(ext, gang("g", 2, 8))  # the watch saw them; no filter call yet
    got = ext.explain("ml/g-0")
    assert got.phase == "pending"
    assert got.reason == (
        "not planned yet: kube-scheduler has not sent ml/g-0 to railyard's filter (check spec.schedulerName "
        "and that the scheduler's extender config points at railyard); planned now: gang ml/g: 2 pods, "
        "16 GPUs on 2 nodes within network.topology.nvidia.com/accelerator b1/r1/n1")
    assert ext.ctx.state.reservations() == {}
