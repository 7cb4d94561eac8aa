"""Where a workload's own numbering puts a member among its gang's slots (``packing.position``),
so that members its controller creates after the gang is planned are told the rank their
workload gives them. The oracle for a JobSet: its controller's global Job index counts the Jobs
of every replicatedJob in spec order (jobset@v0.12.0 pkg/controllers/jobset_controller.go
``globalJobIndex``: the running sum of the replicas of the replicatedJobs before, plus the
Job's index), and a Job numbers its pods 0 .. pods per Job - 1 (its completion index)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from extender.core.model import GangSpec, Member
from extender.core.placement.packing import position, seats


def test_a_one_part_rank_is_its_own_place():
    # A Job's completion index, a LeaderWorkerSet's worker index, Kueue's pod-group pod index.
    assert [position((i,)) for i in (0, 3, 7)] == [0, 3, 7]
    assert position(None) is None


def test_a_jobset_rank_counts_every_pod_of_the_jobs_before_it():
    # leader: 1 Job of 2 pods (global index 0); workers: 2 Jobs of 2 pods (global 1 and 2).
    layout = ((1, 2), (2, 2))
    assert [position((g, c), layout) for g in range(3) for c in range(2)] == [0, 1, 2, 3, 4, 5]
    # Jobs of different sizes: a launcher Job of 1 pod, then 3 Jobs of 4.
    layout = ((1, 1), (3, 4))
    assert position((0, 0), layout) == 0 and position((1, 0), layout) == 1 and position((3, 3), layout) == 12


def test_ranks_the_numbering_does_not_place_have_no_place():
    layout = ((1, 2), (2, 2))
    assert position((3, 0), layout) is None  # no such Job
    assert position((0, 2), layout) is None  # a completion index past the Job's pods
    assert position((0, 1)) is None  # two parts without a layout (a Kubeflow v1 (role, index))
    assert position((0, 1, 2), layout) is None


@given(jobs=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=5))
def test_every_pod_of_a_jobset_has_its_own_place_in_global_index_order(jobs):
    """Enumerate the pods as the JobSet controller labels them: each Job's global index is the
    replicas before it plus its index; inside a Job, completion indexes 0 .. pods - 1. Their
    places are 0 .. N-1 in that order, each once."""
    layout = tuple(jobs)
    ranks, global_index = [], 0
    for replicas, pods in jobs:
        for _ in range(replicas):
            ranks += [(global_index, c) for c in range(pods)]
            global_index += 1
    assert [position(r, layout) for r in ranks] == list(range(len(ranks)))


def members(*ranks: int) -> list[Member]:
    return [Member(f"ml/w-{r}", 8, (r,)) for r in ranks]


def test_while_members_are_missing_each_sits_at_its_own_place_the_rest_in_the_lowest_free():
    gang = GangSpec("ml/g", tuple(members(5, 1)), min_member=8, timeout_seconds=60)
    slots = {0: list(range(8))}  # one class, 8 slots in depth-first order
    seated = seats(gang, members(1, 5), slots)
    assert [m.key if m else None for m in seated] == [None, "ml/w-1", None, None, None, "ml/w-5", None, None]
    # A member with no place (no rank) takes the lowest free slot.
    unranked = Member("ml/x", 8)
    seated = seats(gang, [*members(1), unranked], slots)
    assert [m.key if m else None for m in seated][:2] == ["ml/x", "ml/w-1"]


def test_every_member_present_or_none_with_a_place_keeps_rank_order():
    gang = GangSpec("ml/g", (), min_member=3, timeout_seconds=60)
    assert seats(gang, members(0, 1, 2), {0: [0, 1, 2]}) is None  # all there: rank order as always
    assert seats(gang, [Member("ml/a", 8), Member("ml/b", 8)], {0: [0, 1, 2]}) is None  # no ranks
    assert seats(gang, members(1), {0: [0, 1], 1: [2]}) is None  # two classes


def test_replicated_jobs_of_no_replicas_take_no_places():
    layout = ((0, 2), (2, 3), (0, 5))
    assert [position((g, c), layout) for g in range(2) for c in range(3)] == [0, 1, 2, 3, 4, 5]
    assert position((2, 0), layout) is None
