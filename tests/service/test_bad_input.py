"""The live service with input nobody validated: unreadable GPU requests, pods that never existed.

Issue 11 item 6: a GPU quantity railyard cannot read counted as 0 GPUs, so filter passed every
node; every pod filter was asked about stayed in memory. Reasons are asserted word for word.
"""

from __future__ import annotations

import pytest

from extender.core.errors import GangUnreserved
from extender.core.cluster.pods import MAX_UNSHOWN, SEEN_TTL_SECONDS
from extender.core.verdicts import MAX_REASON_CHARS
from tests.service.test_live import NODES, bind_async, create, extender, wait_until
from tests.topologies import gang, pod

SIZE_2 = {"railyard.io/min-member": "2", "railyard.io/timeout-seconds": "86400"}
QUANTITY = ("is not a number with an optional suffix (n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or e<exponent>)")


def with_gpus(p: dict, value: object) -> dict:
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": value}}
    return p


@pytest.mark.parametrize("value, problem", [
    ("abc", f"container main nvidia.com/gpu: quantity 'abc' {QUANTITY}"),
    ("²", f"container main nvidia.com/gpu: quantity '²' {QUANTITY}"),  # str.isdigit() says yes
    ("1e9", "nvidia.com/gpu must be at most 4096, got 1000000000"),
    ("500m", "container main nvidia.com/gpu must be a whole number, got '500m' (0.5)"),
    (1.5, "container main nvidia.com/gpu must be a whole number, got 1.5"),
    (-8, "container main nvidia.com/gpu must not be negative, got -8"),
    (2**64, "nvidia.com/gpu must be at most 4096, got 18446744073709551616"),
    ("9" * 5000, "container main nvidia.com/gpu: a quantity must be at most 64 characters long, got "
                 "'9999999999999999999999999999999999999999'... (5000 characters)"),
])
def test_a_lone_pod_whose_gpus_cannot_be_read_passes_no_node(value, problem):
    ext, _, _ = extender()
    v = ext.filter(with_gpus(pod("x", 1), value), NODES)
    assert (v.node_names, v.failed) == ((), {})
    assert v.failed_unresolvable == {n: f"pod ml/x is not placed: {problem}" for n in NODES}


# Issue 25 item 4: "500m" GPUs in an init container passed every 8-GPU node while the same value
# in a main container passed none. Each kind of container carries it beside a main container
# asking 8 GPUs; the answer is the same, naming the container.
FRACTION_IN = {
    "init": ("initContainers", {"name": "warm", "resources": {"requests": {"nvidia.com/gpu": "500m"}}},
             "init container warm"),
    "sidecar": ("initContainers", {"name": "log", "restartPolicy": "Always",
                                   "resources": {"limits": {"nvidia.com/gpu": "500m"}}}, "init container log"),
    "main": ("containers", {"name": "aux", "resources": {"limits": {"nvidia.com/gpu": "500m"}}}, "container aux"),
    "overhead": ("overhead", {"nvidia.com/gpu": "500m"}, "overhead"),
}


@pytest.mark.parametrize("kind", FRACTION_IN)
def test_a_fraction_of_a_gpu_gets_the_same_answer_in_every_container_kind(kind):
    field, value, where = FRACTION_IN[kind]
    ext, _, _ = extender()
    lone, member = pod("x", 8), gang("g", 2, 8)[0]
    assert ext.filter(pod("y", 8), NODES).node_names == tuple(NODES)  # without the fraction: every node
    problem = f"{where} nvidia.com/gpu must be a whole number, got '500m' (0.5)"
    for p, reason in ((lone, f"pod ml/x is not placed: {problem}"), (member, f"gang ml/g: pod ml/g-0: {problem}")):
        p["spec"][field] = [*p["spec"].get(field, []), value] if field != "overhead" else value
        create(ext, [p]) if p is member else None
        v = ext.filter(p, NODES)
        assert (v.node_names, v.failed) == ((), {})
        assert v.failed_unresolvable == {n: reason for n in NODES}
    assert ext.ctx.state.reservations() == {}


def test_a_gang_member_whose_gpus_cannot_be_read_passes_no_node_and_is_its_gangs_reason():
    ext, _, _ = extender()
    pods = gang("g", 2, 8)
    with_gpus(pods[0], "abc")
    create(ext, pods)
    problem = f"container main nvidia.com/gpu: quantity 'abc' {QUANTITY}"
    assert ext.filter(pods[0], NODES).failed_unresolvable == {n: f"pod ml/g-0 is not placed: {problem}"
                                                              for n in NODES}
    v = ext.filter(pods[1], NODES)
    assert v.node_names == () and v.failed_unresolvable["h1"] == f"gang ml/g: pod ml/g-0: {problem}"
    assert ext.ctx.state.reservations() == {}


def test_a_reason_is_cut_to_its_bound_however_long_the_names_quoted():
    ext, _, _ = extender()
    p = with_gpus(pod("x" * 100_000, 1), "abc")
    reason = ext.filter(p, ["h1"]).failed_unresolvable["h1"]
    whole = f"pod ml/{'x' * 100_000} is not placed: container main nvidia.com/gpu: quantity 'abc' {QUANTITY}"
    assert len(reason) == MAX_REASON_CHARS
    tail = f"... ({len(whole)} characters in all)"
    assert reason == whole[:MAX_REASON_CHARS - len(tail)] + tail


def test_a_gang_only_filter_knows_holds_its_reservation_until_its_members_time_is_up():
    ext, binder, clock = extender()
    changes = []
    ext.watch_gangs(changes.append)
    ghosts = gang("ghost", 2, 8, annotations=SIZE_2)  # never created: the watch will not show them
    for p in ghosts:
        assert len(ext.filter(p, NODES).node_names) == 1
    assert set(ext.ctx.state.reservations()) == {"ml/ghost"}
    held_then = ext.held()
    assert binder.events == []  # no Event about pods the API server does not have
    clock.now += SEEN_TTL_SECONDS - 1
    ext.debug_gangs(), ext.explain("ml/ghost-0")  # ticks
    assert set(ext.ctx.state.reservations()) == {"ml/ghost"}
    clock.now += 1
    ext.explain("ml/nobody")
    assert ext.ctx.state.reservations() == {}
    assert ext.ctx.pods.unshown() == (0, 0) and ext.ctx.pods.pending_pod("ml/ghost-0") is None
    # What /metrics samples (railyard_held_objects) saw it come and go; running: the drawing's two
    # filler pods (h4, h6).
    assert held_then == {"gangs": 1, "reservations": 1, "pods_pending": 2, "pods_bound": 0, "pods_running": 2,
                         "pods_seen": 2, "pods_unshown": 2}
    assert ext.held() == {**held_then, "gangs": 0, "reservations": 0, "pods_pending": 0, "pods_seen": 0,
                         "pods_unshown": 0}
    assert changes[-1].event == "member_lost" and changes[-1].reason == ("member ml/ghost-0 of gang ml/ghost was forgotten: filter asked about it but the watch "
                          "never showed the pod (not within 60s of its last filter call); planning again")


def test_a_member_held_at_bind_is_told_when_its_unshown_gang_is_forgotten():
    ext, _, clock = extender()
    ghosts = gang("ghost", 2, 8, annotations=SIZE_2)
    node = ext.filter(ghosts[0], NODES).node_names[0]
    errors = {}
    t = bind_async(ext, ghosts[0], node, errors)
    wait_until(lambda: ext.debug_gangs()[0].phase.startswith("waiting"))
    clock.now += SEEN_TTL_SECONDS
    ext.explain("ml/nobody")
    t.join(5)
    # Its gang had no member left that the watch shows, so it is no longer tracked at all.
    assert isinstance(errors["ghost-0"], GangUnreserved)
    assert str(errors["ghost-0"]) == "gang ml/ghost is no longer tracked"


def test_a_pod_named_in_another_gang_since_unreserves_the_gang_that_holds_its_slot():
    ext, _, clock = extender()
    changes = []
    ext.watch_gangs(changes.append)
    first = gang("a", 1, 8, annotations=SIZE_2)[0]
    first["metadata"]["name"] = "same"
    assert len(ext.filter(first, NODES).node_names) == 1
    assert set(ext.ctx.state.reservations()) == {"ml/a"}
    again = gang("b", 1, 8, annotations={"railyard.io/min-member": "5"})[0]  # the same pod, another group
    again["metadata"]["name"] = "same"
    ext.filter(again, NODES)
    clock.now += SEEN_TTL_SECONDS
    ext.explain("ml/nobody")
    assert ext.ctx.state.reservations() == {}
    lost = [(c.gang, c.phase, c.reason) for c in changes if c.event == "member_lost"]
    assert lost == [("ml/a", "pending", "member ml/same of gang ml/a was forgotten: filter asked about it but "
                                        "the watch never showed the pod (not within 60s of its last filter call); "
                                        "planning again")]
    assert all(r.phase.value != "planned" for r in ext.ctx.book.records())  # none left planned with no slots


def test_the_real_gang_is_planned_after_a_flood_of_pods_that_never_existed():
    ext, binder, clock = extender()
    ext.ctx.pods.max_unshown = 50
    changes = []
    ext.watch_gangs(changes.append)
    for i in range(2000):  # 7 gangs of 8-GPU pods that never existed, each planned when it can be
        ext.filter(pod(f"ghost-{i}", 8, labels={"scheduling.x-k8s.io/pod-group": f"ghost-{i % 7}"},
                       annotations=SIZE_2), NODES)
    assert ext.ctx.pods.unshown()[0] <= 51 and len(ext.ctx.pods) <= 51
    assert ext.ctx.pods.forgotten >= 2000 - 51
    lost = [c.reason for c in changes if c.event == "member_lost"]
    assert lost and all(r.endswith("(more than 50 pods or 32 MiB known only from filter); planning again")
                        for r in lost)
    clock.now += SEEN_TTL_SECONDS
    real = gang("real", 2, 8)
    create(ext, real)
    plan = {p["metadata"]["name"]: ext.filter(p, NODES).node_names for p in real}
    assert plan == {"real-0": ("h1",), "real-1": ("h2",)}
    assert set(ext.ctx.state.reservations()) == {"ml/real"}
    errors = {}
    t = bind_async(ext, real[0], "h1", errors)
    ext.bind("ml", "real-1", "uid-ml-real-1", "h2")
    t.join(5)
    assert errors == {} and sorted(binder.bound) == [("ml/real-0", "h1"), ("ml/real-1", "h2")]


def test_the_default_count_bound_holds():
    ext, _, _ = extender()
    for i in range(MAX_UNSHOWN + 200):
        ext.filter(pod(f"ghost-{i}", 1), ["h1"])
    assert ext.ctx.pods.unshown()[0] <= MAX_UNSHOWN + 1


def test_the_log_cuts_a_preemption_reason_that_quotes_long_names(caplog):
    """A preempting gang whose members disagree quotes their names in its reason: the log line is
    cut as the replies are (a hostile burst once wrote one line of about 5 MB)."""
    ext, _, _ = extender()
    members = [pod(f"{'x' * 100_000}-{i}", 8, labels={"scheduling.x-k8s.io/pod-group": "g1"},
                   annotations={"railyard.io/min-member": str(2 + i)}) for i in range(2)]
    create(ext, members)
    caplog.set_level("INFO", logger="railyard")
    assert ext.preempt(members[0], {"h1": []}) == {}
    said = [r.getMessage() for r in caplog.records if "cannot preempt" in r.getMessage()]
    assert said and "members disagree on railyard.io/min-member" in said[0]
    assert max(len(m) for m in said) <= MAX_REASON_CHARS
