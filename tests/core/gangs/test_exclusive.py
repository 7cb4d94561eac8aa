"""Exclusive domains (issue 26 item 2; Slurm's ``--exclusive=topo``): the gang book, the
planner and the lone-pod filter with a manual ``now``.

    rack r1:  nvl n1: a1 a2     nvl n2: b1 b2
    rack r2:  nvl n3: c1 c2                         (8 GPUs each)

The expected domains are read off the drawing and the pods placed on it: an NVLink domain is
clean when none of its nodes has a GPU in use or reserved.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from extender.core.gangs import gangspec
from extender.core.gangs.book import CLAIM_GRACE_SECONDS, GangBook
from extender.core.gangs.lifecycle import HOLDING, Phase
from extender.core.lone import filter_single
from extender.core.model import EXCLUSIVE_DOMAIN, MIN_MEMBER, Declaration, GangRef, Level, NodeFacts, PodFacts, PodUsage
from extender.core.cluster.state import ClusterState

LEVELS = (Level("rack", "rack"), Level("nvl", "nvlink"))
NODES = {"a1": ("r1", "n1"), "a2": ("r1", "n1"), "b1": ("r1", "n2"), "b2": ("r1", "n2"),
         "c1": ("r2", "n3"), "c2": ("r2", "n3")}
DOMAIN = {"a1": "n1", "a2": "n1", "b1": "n2", "b2": "n2", "c1": "n3", "c2": "n3"}


def cluster(used: dict[str, int]) -> tuple[ClusterState, GangBook]:
    state = ClusterState(LEVELS)
    state.set_nodes(NodeFacts(n, {"rack": r, "nvl": v}, 8, allocatable=(("pods", 110),)) for n, (r, v) in NODES.items())
    for node, gpus in used.items():
        state.upsert_pod(PodUsage(f"lone-{node}", node, gpus))
    return state, GangBook(state)


def spec(name: str, members: int, gpus: int = 8, exclusive: str | None = "nvlink"):
    decls = [Declaration(MIN_MEMBER, "railyard.io/min-member", str(members), 0)]
    if exclusive is not None:
        decls.append(Declaration(EXCLUSIVE_DOMAIN, "railyard.io/exclusive-topology", exclusive, 0))
    pods = [PodFacts("ml", f"{name}-{i}", f"uid-{name}-{i}", GangRef(f"ml/{name}", True), gpus=gpus, rank=(i,),
                     declarations=tuple(decls)) for i in range(members)]
    return gangspec.build(f"ml/{name}", pods, None, 60.0)


def planned(book: GangBook, request, now: float = 1000.0) -> list[str]:
    rec = book.record(request.key, now)
    book.reserve(rec, request, now)
    return sorted(s.node for s in rec.placement.slots) if rec.phase in HOLDING else []


def bind(state: ClusterState, book: GangBook, gang: str, now: float) -> None:
    """Every member waits at permit, the Bindings succeed and the watch shows the pods bound."""
    rec = book.get(gang)
    members = {s.member: (f"uid-{s.member.split('/')[1]}", s.node) for s in rec.placement.slots}
    for key, (uid, node) in members.items():
        book.permit(gang, key, uid, node, now)
    book.bindings_done(gang, {k: "" for k in members}, members, now)
    for key, (uid, node) in members.items():
        state.upsert_pod(PodUsage(uid, node, 8), key)
    assert rec.phase == Phase.BOUND


def test_an_exclusive_gang_takes_a_clean_domain_and_keeps_others_out_of_all_of_it():
    state, book = cluster({"a1": 4})
    nodes = planned(book, spec("x", 1))
    clean = {"n2", "n3"}  # n1 has 4 GPUs in use
    assert len(nodes) == 1 and DOMAIN[nodes[0]] in clean
    claimed = sorted(n for n in NODES if DOMAIN[n] == DOMAIN[nodes[0]])
    spare = next(n for n in claimed if n not in nodes)
    reason = book.get("ml/x").reason
    assert reason.endswith(f"; it holds 1 nvlink domain exclusively (r{'1' if DOMAIN[spare] == 'n2' else '2'}/"
                           f"{DOMAIN[spare]}: 2 nodes, 16 GPUs, 8 of them kept free of other pods) until its last pod "
                           f"ends"), reason

    # A lone pod: every node of the claimed domain fails, naming the gang and the domain.
    verdict = filter_single(state.view(), 1, list(NODES))
    assert sorted(verdict.failed) == claimed
    assert verdict.failed[spare] == (f"node {spare} is in nvlink {'r1' if DOMAIN[spare] == 'n2' else 'r2'}/"
                                     f"{DOMAIN[spare]}, held exclusively by gang ml/x "
                                     f"(railyard.io/exclusive-topology) until its last pod ends")
    assert set(verdict.node_names) == set(NODES) - set(claimed)

    # Another gang, exclusive or not, is planned outside it.
    other = planned(book, spec("y", 1, exclusive=None))
    assert other and not set(other) & set(claimed)


def test_the_claim_lasts_while_the_gang_runs_and_opens_once_its_last_pod_ends():
    state, book = cluster({"a1": 8, "b1": 8})
    assert planned(book, spec("x", 2)) == ["c1", "c2"]
    bind(state, book, "ml/x", 1001.0)
    assert book.get("ml/x").reason == ("gang ml/x bound: 2 pods; it holds 1 nvlink domain exclusively (r2/n3: 2 nodes, "
                                       "16 GPUs, 0 of them kept free of other pods) until its last pod ends")
    running = {"ml/x"}
    assert not book.end_claims(1001.0 + CLAIM_GRACE_SECONDS + 1, lambda g: g in running)
    # (a1 and b1 are full: kube-scheduler's own filters leave them out, railyard adds nothing there.)
    assert sorted(filter_single(state.view(), 1, ["a2", "b2", "c1", "c2"]).failed) == ["c1", "c2"]
    state.delete_pod("uid-x-0")
    state.delete_pod("uid-x-1")
    running.clear()
    assert book.end_claims(1100.0, lambda g: g in running)
    verdict = filter_single(state.view(), 1, ["a2", "b2", "c1", "c2"])
    assert verdict.failed == {} and verdict.node_names == ("a2", "b2", "c1", "c2")


def test_a_round_that_ends_unbound_gives_its_domains_back():
    state, book = cluster({})
    assert len(planned(book, spec("x", 2))) == 2
    assert book.expire(1000.0 + 61)
    assert book.end_claims(1061.0, lambda g: False)
    assert state.view().held == {}


def test_without_a_clean_domain_the_reason_says_how_many_nodes_others_use():
    state, book = cluster({"a1": 1, "b2": 1, "c1": 1})
    assert planned(book, spec("x", 1)) == []
    rec = book.get("ml/x")
    assert rec.phase == Phase.PENDING and state.reservations() == {} and state.view().held == {}
    assert rec.reason == ("gang ml/x needs 1 pod x 8 GPUs, in nvlink domains no other pod uses; the cluster fits 0 "
                          "(6 nodes in nvlink domains other pods use, 3 GPUs in use)")  # every node of n1, n2, n3


def test_a_gang_that_is_not_exclusive_fits_the_same_cluster():
    _, book = cluster({"a1": 1, "b2": 1, "c1": 1})
    assert planned(book, spec("x", 1, exclusive=None)) in (["a2"], ["b1"], ["c2"])


def test_an_unknown_exclusive_level_is_the_gangs_reason():
    _, book = cluster({})
    assert planned(book, spec("x", 1, exclusive="pod")) == []
    rec = book.get("ml/x")
    assert rec.phase == Phase.REJECTED
    assert rec.reason == "gang ml/x: exclusive topology level 'pod' is not a level of this cluster (levels: rack, nvl)"


def test_just_bound_it_keeps_its_domains_until_the_watch_shows_a_pod_running_or_the_grace_passes():
    state, book = cluster({})
    planned(book, spec("x", 2))
    bind(state, book, "ml/x", 1000.0)
    assert not book.end_claims(1000.0 + CLAIM_GRACE_SECONDS - 1, lambda g: False)  # the watch lags
    assert book.end_claims(1000.0 + CLAIM_GRACE_SECONDS, lambda g: False)
    assert state.view().held == {}


def test_another_gangs_reason_counts_the_nodes_an_exclusive_gang_holds():
    state, book = cluster({"a1": 8, "a2": 8, "b1": 8, "b2": 8})
    assert planned(book, spec("x", 1, exclusive="rack")) in (["c1"], ["c2"])  # rack r2, all of it
    assert planned(book, spec("z", 1, exclusive=None)) == []
    assert book.get("ml/z").reason == ("gang ml/z needs 1 pod x 8 GPUs; the cluster fits 0 (2 nodes held exclusively "
                                       "by other gangs, 8 GPUs reserved for other gangs, 32 GPUs in use)")


@given(used=st.dictionaries(st.sampled_from(sorted(NODES)), st.integers(1, 8), max_size=6),
       x=st.integers(1, 3), y=st.integers(1, 4), y_exclusive=st.booleans())
def test_no_other_pod_is_ever_planned_into_an_exclusive_gangs_domains(used, x, y, y_exclusive):
    state, book = cluster(used)
    mine = planned(book, spec("x", x))
    domains = {DOMAIN[n] for n in mine}
    # The model: an exclusive gang lands only in NVLink domains where nothing was in use.
    assert not any(DOMAIN[n] in domains for n in used)
    theirs = planned(book, spec("y", y, exclusive="nvlink" if y_exclusive else None))
    assert not {DOMAIN[n] for n in theirs} & domains
    verdict = filter_single(state.view(), 1, list(NODES))
    assert {DOMAIN[n] for n in verdict.node_names}.isdisjoint(domains)
