"""A round of replacements is planned beside the running members, yet each replacement gets its
rank in the whole gang and that rank's slice (issue 20 item 4). The oracle: the ranks are the
rank index labels' order, 0 .. N-1, as the first round gave them."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from extender.core.gangs import gangspec
from extender.core.model import MIN_MEMBER, SLICE_LEVEL, SLICE_SIZE, Declaration, GangRef, PodFacts
from extender.core.placement.homes import home_nodes

DECLARED = (Declaration(MIN_MEMBER, "m", "6", 0), Declaration(SLICE_SIZE, "s", "2", 0),
            Declaration(SLICE_LEVEL, "l", "nvlink", 0))


def member(i: int, node: str = "") -> PodFacts:
    return PodFacts("ml", f"w-{i}", f"uid-{i}", GangRef("ml/g", True), node=node, gpus=8, rank=(i,),
                    declarations=DECLARED, phase="Running" if node else "Pending")


def test_replacements_take_the_ranks_and_slices_of_the_members_they_replace():
    running = [member(i, f"h{i}") for i in (0, 1, 2, 5)]
    spec = gangspec.build("ml/g", [member(4), member(3)], None, 60, running=running)
    assert spec.min_member == 2 and spec.slice_size == 0  # a round of its own, planned unsliced
    ranks = dict(spec.ranks)
    assert (ranks["ml/w-3"], ranks["ml/w-4"]) == (3, 4) and spec.gang_slice_size == 2
    assert ranks["ml/w-5"] == 5


def test_a_replacement_stays_near_its_slice_and_a_round_over_two_slices_near_the_gang():
    running = [member(i, f"h{i}") for i in (0, 1, 2, 4, 5)]
    spec = gangspec.build("ml/g", [member(3)], None, 60, running=running)
    pairs = [(p.key, p.node) for p in running]
    assert home_nodes(spec, pairs) == ["h2"]  # rank 3 is in slice 1 with rank 2
    wide = gangspec.build("ml/g", [member(1), member(3)], None, 60, running=[running[0], *running[2:]])
    assert home_nodes(wide, [(p.key, p.node) for p in [running[0], *running[2:]]]) == ["h0", "h2", "h4", "h5"]


def test_a_first_round_has_no_whole_gang_ranks():
    spec = gangspec.build("ml/g", [member(i) for i in range(6)], None, 60)
    assert spec.ranks == () and spec.slice_size == 2


@given(size=st.integers(1, 12), data=st.data())
def test_every_replacement_of_a_labelled_gang_takes_the_rank_it_replaces(size, data):
    """Ranks 0..N-1 from rank index labels; any members lost and all recreated under new names
    (same labels): each new one gets the rank of the one it replaces, the running keep theirs."""
    lost = data.draw(st.sets(st.integers(0, size - 1), min_size=1, max_size=size - 1) if size > 1 else st.just({0}))
    sized = (Declaration(MIN_MEMBER, "m", str(size), 0),)

    def pod(i: int, name: str, node: str = "") -> PodFacts:
        return PodFacts("ml", name, f"uid-{name}", GangRef("ml/g", True), node=node, gpus=8, rank=(i,),
                        declarations=sized)

    running = [pod(i, f"w-{i}", f"h{i}") for i in range(size) if i not in lost]
    new = [pod(i, f"x-{i}") for i in sorted(lost, reverse=True)]  # new names, any order
    spec = gangspec.build("ml/g", new, None, 60, running=running)
    if not running:
        assert spec.ranks == ()  # the whole gang lost: a first round again
        return
    ranks = dict(spec.ranks)
    assert {p.key: ranks[p.key] for p in [*running, *new]} == {p.key: p.rank[0] for p in [*running, *new]}


def test_a_replacement_takes_the_rank_railyard_told_the_member_it_replaces():
    """The first round's ranks follow the slots, which late members took in the order they came:
    rank index labels and told ranks may differ. The running members keep what they were told;
    the replacement (index 1, told nothing yet) takes the one rank none of them holds."""
    told = {0: 0, 2: 1, 3: 3}  # rank index label -> rank railyard wrote on the pod
    running = [replace(member(i, f"h{i}"), told_rank=r) for i, r in told.items()]
    spec = gangspec.build("ml/g", [member(1)], None, 60, running=running)
    ranks = dict(spec.ranks)
    assert ranks["ml/w-1"] == 2 and [ranks[f"ml/w-{i}"] for i in told] == [0, 1, 3]


def test_clashing_or_missing_told_ranks_fall_back_to_rank_index_labels():
    running = [replace(member(0, "h0"), told_rank=0), replace(member(2, "h2"), told_rank=0), member(3, "h3")]
    spec = gangspec.build("ml/g", [member(1)], None, 60, running=running)
    assert dict(spec.ranks)["ml/w-1"] == 1


def test_a_replacement_round_keeps_the_rail_set_most_running_members_were_told():
    """The first member on each node is told the gang's rail set; a second member on a node the
    rails left there. Rails of another length than the member's GPUs (a hand-edited
    annotation) are not a rail set."""
    four = [replace(member(i, f"h{i}"), gpus=4) for i in range(5)]
    running = [replace(four[0], told_rails=("0", "1", "2", "3")), replace(four[1], told_rails=("4", "5", "6", "7")),
               replace(four[2], told_rails=("0", "1", "2", "3")), replace(four[3], told_rails=("9",) * 5)]
    spec = gangspec.build("ml/g", [replace(member(5), gpus=4)], None, 60, running=running)
    assert spec.rail_set == ("0", "1", "2", "3")
    assert gangspec.build("ml/g", [replace(member(5), gpus=4)], None, 60, running=running[3:]).rail_set == ()
    assert gangspec.build("ml/g", [member(i) for i in range(6)], None, 60).rail_set == ()
