"""Ordered startup (issue 20 item 3): a gang whose controller creates the other members only once
its leads are bound is planned and reserved whole, binds its leads at once, and each later member
into its reserved slot as it comes; what was reserved for members never created ends at the
deadline. The service with an in-memory API server (``test_live``)."""

from __future__ import annotations

from dataclasses import replace

from extender.core.errors import GangTimedOut, GangUnreserved
from extender.core.model import LEAD_SIZE, Declaration, GroupFacts
from tests.service.test_live import NODES, bind_async, create, extender
from tests.topologies import TRANSLATE, gang, pod

SIZE = {"railyard.io/min-member": "3"}


def members(count: int = 3, start: int = 0, lead: bool = False):
    """Translated pods of gang ml/g (8 GPUs each), as the workload adapters give them: the lead
    marked, every member declaring one lead (``LEAD_SIZE``)."""
    leads = Declaration(LEAD_SIZE, "test lead size", "1", 0)
    out = []
    for raw in gang("g", count, 8, annotations=SIZE, start=start):
        facts = TRANSLATE.pod(raw)
        out.append(replace(facts, lead=lead, declarations=(*facts.declarations, leads)))
    return out


def bind(ext, p, node):
    errors = {}
    t = bind_async(ext, {"metadata": {"name": p.name, "uid": p.uid}}, node, errors)
    t.join(5)
    assert not t.is_alive(), f"bind of {p.key} still held"
    return errors.get(p.name)


def running(p, node, phase="Running"):
    return replace(p, node=node, phase=phase)


def lead_bound(ext):
    """The gang's lead created, planned and bound (at once); its node."""
    (lead,) = members(1, lead=True)
    create(ext, [lead])
    (node,) = ext.filter(lead, NODES).node_names
    assert bind(ext, lead, node) is None
    return lead, node


def bind_together(ext, pods):
    """Filter then bind every pod, the bind calls at once; the errors by pod name."""
    nodes = [ext.filter(p, NODES).node_names for p in pods]
    assert all(len(n) == 1 for n in nodes), nodes
    errors = {}
    for t in [bind_async(ext, {"metadata": {"name": p.name, "uid": p.uid}}, n[0], errors) for p, n in zip(pods, nodes)]:
        t.join(5)
    return [n for (n,) in nodes], errors


def test_the_lead_binds_at_once_and_the_others_into_their_reserved_slots_as_they_come():
    ext, binder, _ = extender()
    (lead,) = members(1, lead=True)
    create(ext, [lead])
    (planned,) = ext.filter(lead, NODES).node_names
    view = ext.debug_gangs()[0]
    assert set(view.plan.values()) == {"h1", "h2", "h3"}  # planned whole in rack r1, not one node
    assert bind(ext, lead, planned) is None
    assert binder.bound == [("ml/g-0", planned)]  # not held for members that do not exist yet
    view = ext.debug_gangs()[0]
    assert view.phase == "started" and "2 slots stay reserved" in view.reason
    held = {s.node for s in ext.ctx.state.reservation("ml/g").slots}
    assert held == {"h1", "h2", "h3"} - {planned}
    # A pod of no gang cannot take the reserved slots (kube-scheduler's fit judges the rest).
    loner = pod("solo", 8)
    create(ext, [loner])
    assert not held & set(ext.filter(loner, NODES).node_names)
    ext.pod_upserted(running(lead, planned))
    followers = members(2, start=1)
    create(ext, followers)
    for p in followers:
        (node,) = ext.filter(p, NODES).node_names
        assert node in held
        assert bind(ext, p, node) is None  # bound on arrival
    assert {n for _, n in binder.bound} == {"h1", "h2", "h3"}
    assert ext.debug_gangs()[0].phase == "bound"
    assert sorted(binder.marks[p.key].address.rank for p in [lead, *followers]) == [0, 1, 2]


def test_slots_of_members_never_created_are_given_back_at_the_deadline_with_numbers():
    ext, binder, clock = extender()
    lead, node = lead_bound(ext)
    ext.pod_upserted(running(lead, node))
    clock.now += ext.ctx.settings.gangs.default_timeout_seconds + 1
    ext.expire()
    assert ext.ctx.state.reservation("ml/g") is None
    assert ("ml/g-0", "GangTimedOut") in binder.told
    (told,) = [m for r, m in binder.events if r == "GangTimedOut"]
    assert told.startswith("gang ml/g timed out with 1/3 GPU members bound: 2 slots reserved for members "
                           "not created within 60s given back")


def test_a_lead_that_finished_counts_as_done_when_the_others_come_after_the_deadline():
    ext, binder, clock = extender()
    lead, node = lead_bound(ext)
    ext.pod_upserted(running(lead, node, "Succeeded"))  # an initializer: it ran and finished
    clock.now += ext.ctx.settings.gangs.default_timeout_seconds + 1
    ext.expire()
    followers = members(2, start=1)
    create(ext, followers)
    _, errors = bind_together(ext, followers)
    assert errors == {}  # the two bound together: nobody waited for a third member
    assert sorted(k for k, _ in binder.bound) == ["ml/g-0", "ml/g-1", "ml/g-2"]


def test_a_gang_without_leads_still_binds_all_at_once():
    ext, binder, clock = extender()
    (first,) = members(1)
    first = replace(first, declarations=tuple(d for d in first.declarations if d.role != LEAD_SIZE))
    create(ext, [first])
    (node,) = ext.filter(first, NODES).node_names
    clock.now += 1
    errors = {}
    t = bind_async(ext, {"metadata": {"name": first.name, "uid": first.uid}}, node, errors)
    t.join(0.3)
    assert t.is_alive() and binder.bound == []  # held for the other two
    clock.now += ext.ctx.settings.gangs.default_timeout_seconds + 1
    ext.expire()
    t.join(5)
    assert isinstance(errors["g-0"], GangTimedOut) and binder.bound == []


def test_after_a_restart_of_railyard_the_members_still_to_come_bind_as_one_round_beside_the_leads():
    ext, binder, _ = extender()
    (lead,) = members(1, lead=True)
    ext.pod_upserted(running(lead, "h1"))  # what a new process lists: the lead runs
    followers = members(2, start=1)
    create(ext, followers)
    nodes, errors = bind_together(ext, followers)
    assert sorted(nodes) == ["h2", "h3"]  # beside the lead, in rack r1
    assert errors == {} and sorted(k for k, _ in binder.bound) == ["ml/g-1", "ml/g-2"]


def test_a_lead_size_its_group_object_declares_late_replans_the_waiting_gang_at_once():
    """The workload object (a LeaderWorkerSet with startupPolicy LeaderReady) is watched apart
    from the pods: seen after the leader was planned, it still frees the leader at once."""
    ext, binder, _ = extender()
    (lead,) = members(1, lead=True)
    lead = replace(lead, declarations=tuple(d for d in lead.declarations if d.role != LEAD_SIZE))
    create(ext, [lead])
    (node,) = ext.filter(lead, NODES).node_names
    errors = {}
    t = bind_async(ext, {"metadata": {"name": lead.name, "uid": lead.uid}}, node, errors)
    t.join(0.3)
    assert t.is_alive() and binder.bound == []  # no lead size yet: held for all three
    ext.group_upserted(GroupFacts("ml/g", (Declaration(LEAD_SIZE, "LeaderWorkerSet ml/g startupPolicy", 1, 1),),
                                  kind="podgroups"))
    t.join(5)
    assert isinstance(errors["g-0"], GangUnreserved)
    assert "its group ml/g changed what it asks (size 3 -> 3, leads 0 -> 1): planned again" in str(errors["g-0"])
    (node,) = ext.filter(lead, NODES).node_names  # kube-scheduler's retry
    assert bind(ext, lead, node) is None and binder.bound == [("ml/g-0", node)]
    # The same group again (a status update) changes nothing.
    ext.group_upserted(GroupFacts("ml/g", (Declaration(LEAD_SIZE, "LeaderWorkerSet ml/g startupPolicy", 1, 1),),
                                  kind="podgroups"))
    assert ext.debug_gangs()[0].phase == "started"
