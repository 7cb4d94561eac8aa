"""Gated gang members released whole, each nominated to its planned node (issue 21 items 3-4):
the service over an in-memory double of the Gates port."""

from __future__ import annotations

from extender import topotext
from extender.core.cluster.state import Reservation, Slot
from extender.core.ports import Ports
from extender.adapters.kubeobjects import SCHEME
from extender.service import TopologyExtender
from extender.settings import GangSettings, Settings
from tests.service.test_live import NODES, SETTINGS, Clock, Extender, MemoryBinder
from tests.topologies import gang, pod

GATED = {"schedulingGates": [{"name": "railyard.io/gang"}]}

# [free/total]: h4 has 6 GPUs free, h6 all 8; every other node is full.
DRAWING = """
block b1
  rack r1
    nvl n1: h1[0/8] h2[0/8]
    nvl n2: h3[0/8] h4[6/8]
  rack r2
    nvl n3: h5[0/8] h6[8/8]
"""


class GateBinder(MemoryBinder):
    def __init__(self, fail_release=frozenset()):
        super().__init__()
        self.released: list[tuple[str, str]] = []
        self.nominated: list[tuple[str, str]] = []
        self.fail_release = set(fail_release)

    def release_all(self, pods):
        out = []
        for ref, node in pods:
            if ref.key in self.fail_release:
                out.append(RuntimeError("the server is currently unable to handle the request"))
                continue
            self.released.append((ref.key, node))
            out.append(None)
        return out

    def nominate_all(self, pods):
        self.nominated += list((ref.key, node) for ref, node in pods)
        return [None] * len(pods)


class GatedExtender(Extender):
    """The service with the double wired as its Gates port too (as app.py wires KubeBinder)."""

    def __init__(self, binder, settings=SETTINGS):
        ports = Ports(bindings=binder, evictions=binder, events=binder, claims=binder, scheme=SCHEME, gates=binder)
        self.clock = Clock()
        TopologyExtender.__init__(self, settings, ports, clock=self.clock, sleep=lambda s: None,
                                  kinds=("nodes", "pods", "podgroups"))


def extender(fail_release=frozenset(), drawing=DRAWING, settings=SETTINGS):
    binder = GateBinder(fail_release)
    ext = GatedExtender(binder, settings)
    spec = topotext.load(drawing)
    ext.relisted("nodes", spec.nodes)
    ext.relisted("pods", spec.filler_pods())
    ext.relisted("podgroups", [])
    return ext, binder


def test_a_gang_that_fits_is_released_whole_each_member_nominated_to_its_planned_node():
    ext, binder = extender()
    pods = gang("g", 2, 4, annotations={"railyard.io/min-member": "2"}, **GATED)
    for p in pods:
        ext.pod_upserted(p)
    assert ext.release_gangs(wait=0) == 2
    # Model: the narrowest level that holds 2 x 4 GPUs is one node, and only h6 (8 free) has 8.
    assert sorted(binder.released) == [("ml/g-0", "h6"), ("ml/g-1", "h6")]
    # Released: the scheduler's filter is steered to the same node.
    ungated = gang("g", 2, 4, annotations={"railyard.io/min-member": "2"})
    for p in ungated:
        ext.pod_upserted(p)
    assert ext.filter(ungated[0], NODES).node_names == ("h6",)
    assert ext.release_gangs(wait=0) == 0  # nothing gated is left


def test_a_gang_that_does_not_fit_stays_gated_with_its_reason_until_gpus_free_up():
    ext, binder = extender()
    pods = gang("g", 2, 8, annotations={"railyard.io/min-member": "2"}, **GATED)
    for p in pods:
        ext.pod_upserted(p)
    assert ext.release_gangs(wait=0) == 0
    assert binder.released == []
    reasons = {key: reason for key, reason in binder.told}
    assert reasons == {"ml/g-0": "GangUnschedulable", "ml/g-1": "GangUnschedulable"}
    assert "needs 2 pods x 8 GPUs" in binder.events[-1][1]
    assert ext.release_gangs(wait=0) == 0  # nothing changed: still gated
    # Free h5 (a filler pod goes): h5 and h6 hold the gang within rack r2's NVLink domain n3.
    filler = next(p for p in topotext.load(DRAWING).filler_pods() if p["spec"]["nodeName"] == "h5")
    ext.pod_deleted(filler)
    assert ext.release_gangs(wait=0) == 2
    assert sorted(node for _, node in binder.released) == ["h5", "h6"]


def test_a_pass_whose_plan_stands_plans_tells_and_wakes_nothing_again():
    """GPUs free where they cannot make room (every NVLink domain keeps one node with 8 free):
    the gang's last plan stands; no Event is repeated and no bind call is woken to look again."""
    ext, binder = extender()
    pods = gang("g", 2, 8, annotations={"railyard.io/min-member": "2", "railyard.io/required-topology": "nvlink"},
                **GATED)
    for p in pods:
        ext.pod_upserted(p)
    assert ext.release_gangs(wait=0) == 0
    told, wakes = len(binder.told), []
    changed = ext.ctx.changed
    ext.ctx.changed = lambda wake=True: (wakes.append(wake), changed(wake))
    filler = next(p for p in topotext.load(DRAWING).filler_pods() if p["spec"]["nodeName"] == "h4")
    ext.pod_deleted(filler)  # h4: 8 free, beside h3 with none
    ext.clock.now += 1
    wakes.clear()
    assert ext.release_gangs(wait=0) == 0
    assert len(binder.told) == told and True not in wakes
    ext.clock.now += 5  # its numbers 5 s old: planned again, and told
    filler = next(p for p in topotext.load(DRAWING).filler_pods() if p["spec"]["nodeName"] == "h1")
    ext.pod_deleted(filler)  # h1: 8 free, beside h2 with none
    wakes.clear()
    assert ext.release_gangs(wait=0) == 0
    assert binder.told[told:] == binder.told[:told] and True in wakes  # CannotPreempt, GangUnschedulable


def test_members_without_railyards_gate_are_left_alone():
    ext, binder = extender()
    for p in gang("open", 2, 1, annotations={"railyard.io/min-member": "2"}):  # no gate
        ext.pod_upserted(p)
    assert ext.release_gangs(wait=0) == 0
    assert binder.released == []


def test_a_failed_write_is_tried_again_at_the_next_pass():
    ext, binder = extender(fail_release={"ml/g-1"})
    for p in gang("g", 2, 4, annotations={"railyard.io/min-member": "2"}, **GATED):
        ext.pod_upserted(p)
    assert ext.release_gangs(wait=0) == 1
    binder.fail_release.clear()
    assert ext.release_gangs(wait=0) == 1
    assert sorted(binder.released) == [("ml/g-0", "h6"), ("ml/g-1", "h6")]


def test_without_a_gates_port_nothing_is_released():
    binder = MemoryBinder()
    ext = Extender(SETTINGS, binder, clock=Clock())
    assert ext.release_gangs(wait=0) == 0


def test_a_gang_is_planned_at_its_first_member_and_a_late_member_is_released_at_once():
    ext, binder = extender()
    pods = gang("g", 2, 4, annotations={"railyard.io/min-member": "2"}, **GATED)
    ext.pod_upserted(pods[0])
    assert ext.release_gangs(wait=0) == 1
    assert binder.released == [("ml/g-0", "h6")]
    assert ext.debug_gangs()[0].phase == "planned"  # both slots held, on h6
    ext.pod_upserted(pods[1])
    assert ext.release_gangs(wait=0) == 1
    assert binder.released[1] == ("ml/g-1", "h6")  # the slot kept for it


def test_a_gang_held_by_another_components_gate_is_planned_only_once_it_is_lifted():
    ext, binder = extender()
    held = {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}, {"name": "railyard.io/gang"}]}
    pods = gang("g", 2, 4, annotations={"railyard.io/min-member": "2"}, **held)
    for p in pods:
        ext.pod_upserted(p)
    assert ext.release_gangs(wait=0) == 0
    assert binder.events[-1] == ("GangWaiting", "gang ml/g: 2 of 2 gated members still carry other scheduling gates "
                                                "(kueue.x-k8s.io/admission); railyard plans it once those are lifted")
    assert ext.debug_gangs() == [] or ext.debug_gangs()[0].phase == "pending"
    for p in gang("g", 2, 4, annotations={"railyard.io/min-member": "2"}, **GATED):  # Kueue admitted it
        ext.pod_upserted(p)
    assert ext.release_gangs(wait=0) == 2


def test_a_gang_of_undeclared_size_waits_gated_until_it_settles():
    ext, binder = extender(settings=Settings(gangs=GangSettings(settle_seconds=5)))
    for p in gang("g", 2, 4, **GATED):  # no size declared: the members seen
        ext.pod_upserted(p)
    assert ext.release_gangs(wait=0) == 0
    reason, message = binder.events[-1]
    assert reason == "GangWaiting" and message.startswith("gang ml/g declares no size: 2 members seen")
    ext.clock.now += 5
    assert ext.release_gangs(wait=0) == 2  # settled: planned whole, released


def test_freed_gpus_replan_waiting_gangs_at_most_every_half_second():
    ext, binder = extender()
    within_nvlink = {"railyard.io/min-member": "2", "railyard.io/required-topology": "nvlink"}
    for p in gang("g", 2, 8, annotations=within_nvlink, **GATED):
        ext.pod_upserted(p)
    assert ext.release_gangs(wait=0) == 0  # no room
    fillers = [p for p in topotext.load(DRAWING).filler_pods() if p["spec"]["nodeName"] in ("h1", "h5")]
    ext.pod_deleted(fillers[0])
    assert ext.release_gangs(wait=0) == 0  # swept: h1 is alone in its NVLink domain n1
    ext.pod_deleted(fillers[1])
    assert ext.release_gangs(wait=0) == 0  # freed again within 0.5 s: not swept yet
    ext.clock.now += 0.5
    assert sorted(binder.released) == [] and ext.release_gangs(wait=0) == 2
    assert sorted(node for _, node in binder.released) == ["h5", "h6"]  # n3


def test_a_starving_gated_gang_nominates_its_members_to_its_drain_and_lands_there():
    """Past the starvation bound the gang's drain holds GPUs as they free up; lone pods no longer
    pass railyard's filter, so each gated member is nominated to its drain slot's node (gate
    kept) and kube-scheduler keeps pods of no lower priority off them. Written once, not at
    every pass."""
    ext, binder = extender(settings=Settings(gangs=GangSettings(settle_seconds=0, starvation_seconds=60)))
    pods = gang("g", 2, 8, annotations={"railyard.io/min-member": "2"}, **GATED)
    for p in pods:
        ext.pod_upserted(p)
    assert ext.release_gangs(wait=0) == 0 and binder.nominated == []  # no room, not starving yet
    ext.clock.now += 61  # nothing changed, but the gang starves now: it is tried again
    assert ext.release_gangs(wait=0) == 0
    drain = {s.member: s.node for s in ext.ctx.state.reservations()["ml/g#drain"].slots}
    # Model: on the cluster drained of every running pod, 2 x 8 GPUs fit on the 2 nodes of one
    # NVLink domain: n1 (h1 h2), n2 (h3 h4) or n3 (h5 h6).
    assert sorted(binder.nominated) == sorted((m.removesuffix("#drain"), n) for m, n in drain.items())
    assert {n for _, n in binder.nominated} in ({"h1", "h2"}, {"h3", "h4"}, {"h5", "h6"})
    assert binder.released == []  # still gated
    ext.pod_upserted({**pods[1]})
    assert ext.release_gangs(wait=0) == 0 and len(binder.nominated) == 2  # nothing new to write
    # The gang asks again every half bound, so its drain (held for a bound after each ask) stays.
    for _ in range(3):
        ext.clock.now += 31
        assert ext.release_gangs(wait=0) == 0
    assert {s.member: s.node for s in ext.ctx.state.reservations()["ml/g#drain"].slots} == drain
    assert len(binder.nominated) == 2
    # The drained domain's busy node frees: the gang is planned there and released, nominated again.
    busy = [n for _, n in binder.nominated if n != "h6"]
    for filler in topotext.load(DRAWING).filler_pods():
        if filler["spec"]["nodeName"] in busy:
            ext.pod_deleted(filler)
    ext.clock.now += 1
    assert ext.release_gangs(wait=0) == 2
    assert sorted(binder.released) == sorted(binder.nominated)


def drained():
    """A gated gang of 2 x 8 GPUs past its starvation bound: each member nominated to its drain's
    node (``binder.nominated``, member -> node)."""
    ext, binder = extender(settings=Settings(gangs=GangSettings(settle_seconds=0, starvation_seconds=60)))
    for p in gang("g", 2, 8, annotations={"railyard.io/min-member": "2"}, **GATED):
        ext.pod_upserted(p)
    ext.release_gangs(wait=0)
    ext.clock.now += 61
    ext.release_gangs(wait=0)
    assert len(binder.nominated) == 2 and all(node for _, node in binder.nominated)
    return ext, binder


def test_a_drain_that_moves_without_its_gang_takes_its_nominations_along_at_the_next_pass():
    """A drain moves or goes without its gang being tried: an older starving gang's drain takes
    its nodes (``starvation.drain`` gives a younger overlapping drain back), or it lapses.
    kube-scheduler keeps counting a stale nomination, and a gang planned on those nodes found
    them full until its timeout (the ``gangs`` run of 2026-12-07). So each pass puts every gated
    member's nomination where its drain is now, or clears it, though its gang is not due."""
    ext, binder = drained()
    nominated = list(binder.nominated)
    with ext.ctx.cond:  # as an older gang's drain takes these nodes
        ext.ctx.state.release("ml/g#drain")
    ext.clock.now += 1  # the gang is not due: its next try is half a bound after the last
    assert ext.release_gangs(wait=0) == 0
    assert binder.nominated[2:] == [(key, "") for key, _ in nominated]
    assert ext.release_gangs(wait=0) == 0 and len(binder.nominated) == 4  # written once


def test_a_drain_member_is_not_nominated_where_another_gangs_plan_holds_gpus():
    """A drain may hold GPUs another gang is planned on (for when that gang is done), but its
    gated member nominated there is counted by kube-scheduler before the planned member, which
    then never reaches railyard and its gang times out at bind (the ``gangs`` run of 2026-12-07
    at 8e78583: 16 of a 128-pod gang's members). The nomination waits until the plan is gone."""
    ext, binder = drained()
    (first, node), (second, other) = sorted(binder.nominated)
    with ext.ctx.cond:  # another gang planned on the first member's drain node, not bound yet
        ext.ctx.state.reserve(Reservation("ml/p", (Slot("ml/p-0", node, 8),), ext.clock.now + 60))
    ext.clock.now += 1
    assert ext.release_gangs(wait=0) == 0
    assert binder.nominated[2:] == [(first, "")]
    with ext.ctx.cond:  # that gang bound: its pods use the GPUs, the drain waits for them
        res = ext.ctx.state.release("ml/p")
        ext.ctx.state.reserve(Reservation("ml/p", res.slots, res.deadline, bound=True))
    ext.clock.now += 1
    assert ext.release_gangs(wait=0) == 0
    assert binder.nominated[3:] == [(first, node)]
    assert dict(binder.nominated)[second] == other


def test_a_gated_gang_that_prefers_a_narrower_domain_waits_then_is_released_wider():
    """A preferred level with a bounded wait: the release pass waits it out (before, the pass
    failed at every try with the gang's Preferring), then plans the gang wider."""
    ext, binder = extender()
    annotations = {"railyard.io/min-member": "2", "railyard.io/preferred-topology": "nvlink",
                   "railyard.io/preferred-topology-wait-seconds": "10"}
    for p in gang("g", 2, 6, annotations=annotations, **GATED):
        ext.pod_upserted(p)
    # Model: 6 GPUs are free only on h4 (NVLink n2) and h6 (n3); no NVLink domain holds 2 x 6.
    assert ext.release_gangs(wait=0) == 0
    assert binder.released == [] and binder.events[-1][0] == "GangPreferring"
    ext.clock.now += 5
    assert ext.release_gangs(wait=0) == 0  # still within its wait
    ext.clock.now += 6
    assert ext.release_gangs(wait=0) == 2
    assert sorted(node for _, node in binder.released) == ["h4", "h6"]
