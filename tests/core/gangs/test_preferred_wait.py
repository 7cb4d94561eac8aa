"""A preferred level with a bounded wait (issue 26 item 1; Slurm's ``--switches=N@max-time``):
the gang book with a manual ``now``, no clock, no threads.

    rack r1:  nvl n1: a1 a2     nvl n2: b1 b2      (8 GPUs each)

``run-a`` and ``run-b`` take a1 and b1 whole; gang ``ml/g`` (2 x 8 GPUs) prefers one NVLink
domain and waits 60 s for it. The expected nodes are read off the drawing: an NVLink domain
holds the gang only when both its nodes are free; the rack holds it on the two free nodes.
"""

from __future__ import annotations

from extender.core.gangs import gangspec
from extender.core.gangs.book import GangBook
from extender.core.gangs.lifecycle import HOLDING, Phase
from extender.core.model import (
    MIN_MEMBER,
    PREFERRED,
    PREFERRED_WAIT,
    REQUIRED,
    Declaration,
    GangRef,
    Level,
    NodeFacts,
    PodFacts,
    PodUsage,
)
from extender.core.cluster.state import ClusterState

LEVELS = (Level("rack", "rack"), Level("nvl", "nvlink"))
NODES = {"a1": "n1", "a2": "n1", "b1": "n2", "b2": "n2"}
WAIT = "railyard.io/preferred-topology-wait-seconds"


def cluster(busy=("a1", "b1")) -> tuple[ClusterState, GangBook]:
    state = ClusterState(LEVELS)
    state.set_nodes(NodeFacts(n, {"rack": "r1", "nvl": nvl}, 8, allocatable=(("pods", 110),)) for n, nvl in NODES.items())
    for node in busy:
        state.upsert_pod(PodUsage(f"run-{node}", node, 8))
    return state, GangBook(state, starvation_seconds=60.0)


def spec(wait: object = "60", preferred: str | None = "nvlink", required: str | None = None, cap: float = 300.0,
         members: int = 2):
    decls = [Declaration(MIN_MEMBER, "railyard.io/min-member", str(members), 0)]
    if preferred is not None:
        decls.append(Declaration(PREFERRED, "railyard.io/preferred-topology", preferred, 0))
    if required is not None:
        decls.append(Declaration(REQUIRED, "railyard.io/required-topology", required, 0))
    if wait is not None:
        decls.append(Declaration(PREFERRED_WAIT, WAIT, wait, 0))
    pods = [PodFacts("ml", f"g-{i}", f"uid-g-{i}", GangRef("ml/g", True), gpus=8, rank=(i,),
                     declarations=tuple(decls)) for i in range(members)]
    return gangspec.build("ml/g", pods, None, 60.0, max_preferred_wait=cap)


def planned(book: GangBook, now: float, request=None) -> set[str]:
    rec = book.record("ml/g", now)
    book.prepare(rec, "ml/g-0")
    book.reserve(rec, request or spec(), now)
    return {s.node for s in rec.placement.slots} if rec.phase in HOLDING else set()


def test_within_the_wait_it_holds_nothing_and_says_how_long_is_left_and_where_it_fits_now():
    state, book = cluster()
    assert planned(book, 1000.0) == set()
    rec = book.get("ml/g")
    assert rec.phase == Phase.PENDING and rec.preferring_until == 1060.0
    assert state.reservations() == {} and rec.unplaced_since is None  # waiting by choice is not starving
    assert rec.reason == (
        "gang ml/g needs 2 pods x 8 GPUs within one nvl; best nvlink r1/n1 fits 1 (8 GPUs in use); it waits 60s "
        "more (of 60s) for one, holding nothing, then takes a wider domain: it fits now within rack r1")
    assert planned(book, 1042.0) == set()
    assert "it waits 18s more (of 60s)" in book.get("ml/g").reason


def test_a_domain_that_frees_within_the_wait_takes_the_gang():
    state, book = cluster()
    assert planned(book, 1000.0) == set()
    state.delete_pod("run-b1")
    assert planned(book, 1030.0) == {"b1", "b2"}
    rec = book.get("ml/g")
    assert rec.preferring_until is None and state.reservation("ml/g") is not None


def test_after_the_wait_it_takes_the_wider_domain_it_fits():
    state, book = cluster()
    assert planned(book, 1000.0) == set()
    assert planned(book, 1059.0) == set()
    assert planned(book, 1060.0) == {"a2", "b2"}
    assert "within rack r1" in book.get("ml/g").reason


def test_the_wait_spans_rounds_and_restarts_only_once_the_gang_was_bound():
    state, book = cluster()
    assert planned(book, 1000.0) == set()
    assert planned(book, 1061.0) == {"a2", "b2"}
    assert book.expire(1061.0 + 61.0)  # its round timed out at bind: planned again, wider at once
    assert planned(book, 1200.0) == {"a2", "b2"}
    rec = book.get("ml/g")
    for key in ("ml/g-0", "ml/g-1"):
        slot = state.slot_of(key)
        book.permit("ml/g", key, f"uid-{key[3:]}", slot.node, 1201.0)
    book.bindings_done("ml/g", {"ml/g-0": "", "ml/g-1": ""},
                       {k: (f"uid-{k[3:]}", state.slot_of(k).node) for k in ("ml/g-0", "ml/g-1")}, 1201.0)
    assert rec.phase == Phase.BOUND and rec.preferring_since is None
    assert planned(book, 1300.0) == set()  # planned again once bound: its wait starts afresh
    assert book.get("ml/g").preferring_since == 1300.0


def test_a_gang_that_fits_nowhere_even_wider_lacks_room_and_its_starvation_clock_runs():
    state, book = cluster(busy=("a1", "b1", "b2"))
    assert planned(book, 1000.0) == set()
    rec = book.get("ml/g")
    assert rec.preferring_until is None and rec.unplaced_since == 1000.0
    assert rec.reason == "gang ml/g needs 2 pods x 8 GPUs; the cluster fits 1 (24 GPUs in use)"
    # Past the starvation bound it drains where it fits at its real bound, and no wait for the
    # preferred level applies to a drained gang: the bound on waiting wins over the preference.
    assert planned(book, 1061.0) == set()
    drain = state.reservation("ml/g#drain")
    assert drain is not None and len(drain.slots) == 2


def test_without_a_wait_or_with_the_preferred_level_free_it_is_planned_at_once():
    _, book = cluster()
    assert planned(book, 1000.0, spec(wait=None)) == {"a2", "b2"}
    _, book = cluster(busy=("a1",))
    assert planned(book, 1000.0) == {"b1", "b2"}


def test_the_wait_is_capped_and_the_reason_says_so():
    _, book = cluster()
    assert planned(book, 1000.0, spec(wait="900", cap=120.0)) == set()
    rec = book.get("ml/g")
    assert rec.preferring_until == 1120.0
    assert "it waits 120s more (of 120s, capped from 900s by gangs.max_preferred_wait_seconds)" in rec.reason


def test_bad_waits_are_the_gangs_reason():
    assert spec(wait="10m").invalid == (f"{WAIT} must be a positive integer, got '10m'",)
    assert spec(wait="0").invalid == (f"{WAIT} must be a positive integer, got '0'",)
    assert spec(wait="86401").invalid == (f"{WAIT} must be at most 86400, got '86401'",)
    assert spec(preferred=None).invalid == (
        f"{WAIT} is set without a preferred topology level: it is the wait for one",)
    assert spec(wait="600").preferred_wait_seconds == 300.0  # the cap
    _, book = cluster()
    assert planned(book, 1000.0, spec(wait="abc")) == set()
    assert book.get("ml/g").phase == Phase.REJECTED
