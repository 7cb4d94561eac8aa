"""Exclusive slices (a JobSet with exclusive placement) over random small clusters, against an
oracle that reads domains from the nodes' labels (no planner code, no Topology).

The rule, as JobSet's webhook enforces it (jobset@v0.12.0 ``pkg/webhooks/pod_webhook.go``):
each Job's pods share one domain of the exclusive level, and no two Jobs share one. A gang of J
Jobs of S pods fits a domain of its required level exactly when J distinct domains of the
exclusive level inside it each hold S pods.
"""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from extender.core import verdicts
from extender.core.cluster.state import Reservation, claim_slot
from extender.core.model import GangSpec, Member, NodeFacts
from extender.core.placement.address import addresses
from extender.core.placement.planner import NoPlacement, Placement, plan
from tests.core.placement.test_slice_properties import HOST, build, clusters, group, level_word, slots


@st.composite
def exclusive_gangs(draw):
    """J Jobs of S pods; of each Job only some pods exist yet (its leader, some followers, or
    none), the rest are slots for members not created yet."""
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    size = draw(st.integers(1, 3))
    jobs = draw(st.integers(1, 4))
    level = draw(st.sampled_from(["rack", HOST]))
    required = draw(st.sampled_from([None, "block"] if level == "rack" else [None, "block", "rack"]))
    members = tuple(Member(f"ml/j{j}-{i}", gpus, (j, i), part=j)
                    for j in range(jobs) for i in range(draw(st.integers(0, size))))
    members = tuple(draw(st.permutations(members)))
    return GangSpec("ml/g", members, jobs * size, 60.0, required=required, slice_size=size, slice_level=level,
                    exclusive=True)


def domains_holding(nodes, free, gang: GangSpec) -> int:
    """How many domains of the exclusive level among ``nodes`` hold a whole Job each."""
    per: dict[tuple, int] = {}
    for n in nodes:
        key = group(n, gang.slice_level)
        per[key] = per.get(key, 0) + slots(n, free[n.name], gang.members[0].gpus if gang.members else 1)
    return sum(1 for v in per.values() if v >= gang.slice_size)


def jobs_of(gang: GangSpec) -> int:
    return gang.min_member // gang.slice_size


@settings(max_examples=400, deadline=None)
@given(clusters(), exclusive_gangs())
def test_each_job_in_a_domain_of_its_own(cluster, gang):
    nodes, used = cluster
    if not gang.members:
        gang = GangSpec(gang.key, (Member("ml/j0-0", 8, (0, 0), part=0),), gang.min_member, 60.0,
                        required=gang.required, slice_size=gang.slice_size, slice_level=gang.slice_level,
                        exclusive=True)
    state = build(nodes, used)
    free = {n.name: n.gpus - used[n.name] for n in nodes}
    by_name = {n.name: n for n in nodes}
    within: dict[tuple, list] = {}
    for n in nodes:
        within.setdefault(group(n, gang.required), []).append(n)
    expected = any(domains_holding(ns, free, gang) >= jobs_of(gang) for ns in within.values())
    result = plan(gang, state.view())
    event("feasible" if expected else "infeasible")
    assert isinstance(result, Placement) == expected, (result, free)
    if not isinstance(result, Placement):
        assert result.slices is not None and result.slices.exclusive
        assert result.slices_fit < jobs_of(gang)
        text = verdicts.explain_no_placement(state.topology, result)
        assert "of its own" in text and f"of {jobs_of(gang)} slices" in text, text
        return

    # Never over-committing a node, never on a cordoned one; the gang inside its required level.
    taken: dict[str, int] = {}
    for s in result.slots:
        taken[s.node] = taken.get(s.node, 0) + s.gpus
    assert all(g <= free[node] and not by_name[node].unschedulable for node, g in taken.items())
    assert len({group(by_name[s.node], gang.required) for s in result.slots}) == 1

    # Each Job's slots (its members', and the slots its members not created yet may claim) in
    # one domain of the exclusive level; no two Jobs in one.
    part_of = {m.key: m.part for m in gang.members}
    job_slots: dict[int, list] = {}
    for s in result.slots:
        job = part_of.get(s.member, s.part)
        assert job is not None, s
        job_slots.setdefault(job, []).append(s)
    assert sorted(job_slots) == list(range(jobs_of(gang)))
    homes = []
    for job, mine in sorted(job_slots.items()):
        assert len(mine) == gang.slice_size
        domains = {group(by_name[s.node], gang.slice_level) for s in mine}
        assert len(domains) == 1, (job, domains)
        homes.append(domains.pop())
    assert len(set(homes)) == len(homes), homes

    # The narrowest level: no narrower domain holds a domain of its own for every Job.
    order = [None, "block", "rack", HOST]
    for narrower in order[order.index(level_word(result.level)) + 1:]:
        per: dict[tuple, list] = {}
        for n in nodes:
            per.setdefault(group(n, narrower), []).append(n)
        assert all(domains_holding(ns, free, gang) < jobs_of(gang) for ns in per.values()), narrower

    # Ranks by Job, then by index: Job j's members and slots take ranks j*S .. (j+1)*S - 1.
    for a in addresses(state.topology, result):
        job = part_of.get(a.pod, next(s.part for s in result.slots if s.member == a.pod))
        assert a.rank is not None and a.rank // gang.slice_size == job == a.slice, a
    for m in gang.members:
        ranks = sorted((a.rank, a.pod) for a in addresses(state.topology, result) if part_of.get(a.pod) == m.part)
        assert [p for _, p in ranks] == sorted(p for p, j in part_of.items() if j == m.part)


RACK = {"h0": "r0", "h1": "r0", "h2": "r1", "h3": "r1"}
"""The model of the two racks below: node -> rack."""
TWO_RACKS = [NodeFacts(node, {"block": "b1", "rack": rack}, 8, allocatable=(("pods", 110),)) for node, rack in RACK.items()]


def test_a_follower_claims_a_slot_of_its_own_job_only():
    """A member created after planning (a Job's follower, admitted once its leader is bound)
    takes a slot reserved for its Job, in its Job's domain, never another Job's."""
    state = build(TWO_RACKS, {n.name: 0 for n in TWO_RACKS})
    leads = (Member("ml/j0-0", 8, (0, 0), part=0), Member("ml/j1-0", 8, (1, 0), part=1))
    gang = GangSpec("ml/g", leads, 4, 60.0, slice_size=2, slice_level="rack", exclusive=True)
    result = plan(gang, state.view())
    assert isinstance(result, Placement)
    state.reserve(Reservation("ml/g", result.slots, 60.0))
    rack = {s.member: RACK[s.node] for s in result.slots}
    assert rack["ml/j0-0"] != rack["ml/j1-0"]
    assert claim_slot(state, "ml/g", "ml/j1-1", 8, 1) is not None
    assert RACK[state.slot_of("ml/j1-1").node] == rack["ml/j1-0"]
    assert claim_slot(state, "ml/g", "ml/j1-2", 8, 1) is None  # Job 1 is full: Job 0's slot is not its
    assert claim_slot(state, "ml/g", "ml/j0-1", 8, 0) is not None
    assert RACK[state.slot_of("ml/j0-1").node] == rack["ml/j0-0"]


def test_the_reason_says_one_job_per_domain_and_how_many_fit():
    """Two racks, each with room for a whole Job: three Jobs do not fit, and the reason says so
    with the numbers, though the GPUs would hold all three."""
    state = build(TWO_RACKS, {n.name: 0 for n in TWO_RACKS})
    gang = GangSpec("ml/g", (Member("ml/j0-0", 2, (0, 0), part=0),), 3, 60.0, slice_size=1,
                    slice_level="rack", exclusive=True)
    result = plan(gang, state.view())
    assert isinstance(result, NoPlacement)
    assert verdicts.explain_no_placement(state.topology, result) == (
        "gang ml/g needs 3 pods x 2 GPUs in 3 slices of 1 pod, each within a rack of its own; "
        "the cluster holds 2 of 3 slices: it fits 3 pods, but only 2 in whole slices")
