"""The pod index's memory of filter calls: pods the watch never showed are bounded and expire.

Examples with exact numbers, then a state machine (filter calls, watch events, relists and
time in any order) against a model that only remembers when each pod was last filtered and
whether the watch showed it.
"""

from __future__ import annotations

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from extender.core.model import GangRef, PodFacts
from extender.core.cluster.pods import MAX_UNSHOWN, MAX_UNSHOWN_BYTES, SEEN_TTL_SECONDS, PodIndex, footprint
from extender.core.cluster.state import ClusterState


def facts(name: str, gang: str | None = "g", gpus: int = 8, node: str = "", phase: str = "Pending",
          ns: str = "ml") -> PodFacts:
    ref = GangRef(f"{ns}/{gang}", True) if gang else GangRef(f"{ns}/{name}", False)
    return PodFacts(ns, name, f"uid-{name}", ref, node=node, phase=phase, gpus=gpus)


def test_the_bounds_are_what_the_reference_says():
    assert (SEEN_TTL_SECONDS, MAX_UNSHOWN, MAX_UNSHOWN_BYTES) == (60.0, 5000, 32 << 20)


def test_a_pod_only_filter_saw_is_pending_until_its_time_is_up_then_forgotten():
    pods = PodIndex()
    pod = facts("a-0")
    pods.filtered(pod, now=100.0)
    assert pods.pending_pod("ml/a-0") is pod and pods.seen_pod("ml/a-0") is pod
    assert pods.unshown_pod("ml/a-0") and pods.unshown() == (1, footprint(pod))
    assert pods.expire(159.9) == ([], [])
    pods.filtered(pod, now=150.0)  # asked again: its time starts again
    assert pods.expire(209.9) == ([], [])
    assert pods.expire(210.0) == ([], [pod])
    assert pods.pending_pod("ml/a-0") is None and pods.seen_pod("ml/a-0") is None
    assert not pods.has_pending("ml/g") and pods.unshown() == (0, 0) and pods.forgotten == 1


def test_a_pod_the_watch_shows_is_never_forgotten_and_filter_keeps_no_copy_of_it():
    pods, state = PodIndex(), ClusterState()
    watched = facts("a-0")
    pods.changed(watched, state)
    request = facts("a-0")  # the same pod, as a filter request carries it: another object
    pods.filtered(request, now=100.0)
    assert pods.seen_pod("ml/a-0") is watched and not pods.unshown_pod("ml/a-0")
    assert pods.expire(1000.0) == ([], [])
    assert pods.seen_pod("ml/a-0") is None  # what filter saw is dropped ...
    assert pods.pending_pod("ml/a-0") is watched  # ... and bind finds the pod pending
    assert pods.forgotten == 0


def test_the_watch_showing_a_pod_later_makes_it_kept():
    pods, state = PodIndex(), ClusterState()
    pods.filtered(facts("a-0"), now=100.0)
    pods.changed(facts("a-0"), state)
    assert not pods.unshown_pod("ml/a-0") and pods.unshown() == (0, 0)
    assert pods.expire(1000.0) == ([], [])
    assert pods.pending_pod("ml/a-0") is not None


def test_a_pod_railyard_bound_is_never_forgotten_as_unshown():
    pods = PodIndex()
    pods.filtered(facts("a-0"), now=100.0)
    pods.took_bound("ml/a-0", "h1")
    assert pods.expire(1000.0) == ([], [])
    assert pods.forgotten == 0


def test_a_member_railyard_bound_counts_as_bound_there_before_the_watch_shows_it():
    """A next round of its gang, planned before the watch caught up, must not ask for it again."""
    pods, state = PodIndex(), ClusterState()
    pods.changed(facts("a-0", gang="a"), state)
    pods.took_bound("ml/a-0", "h1")
    assert pods.pending_of("ml/a") == []
    assert [(p.key, p.node) for p in pods.bound_pods("ml/a")] == [("ml/a-0", "h1")]
    pods.deleted(facts("a-0", gang="a"), state)  # deleted before the watch showed it bound
    assert pods.bound_pods("ml/a") == []


def test_past_the_count_the_oldest_unshown_pods_are_forgotten_first():
    pods = PodIndex()
    pods.max_unshown = 3
    made = [facts(f"a-{i}") for i in range(5)]
    for i, pod in enumerate(made):
        pods.filtered(pod, now=100.0 + i)
    pods.filtered(made[0], now=105.0)  # a-0 asked again: now the newest
    crowded, expired = pods.expire(106.0)
    assert (crowded, expired) == ([made[1], made[2]], [])
    assert [k for k in ("ml/a-0", "ml/a-1", "ml/a-2", "ml/a-3", "ml/a-4") if pods.unshown_pod(k)] == [
        "ml/a-0", "ml/a-3", "ml/a-4"]
    assert pods.forgotten == 2


def test_past_the_bytes_the_oldest_go_first():
    pods = PodIndex()
    big = [PodFacts("ml", f"big-{i}" + "x" * 100_000, f"uid-{i}", GangRef("ml/g", True), gpus=8) for i in range(3)]
    pods.max_unshown_bytes = 2 * footprint(big[0]) + 100
    for i, pod in enumerate(big):
        pods.filtered(pod, now=100.0 + i)
    assert footprint(big[0]) > 200_000  # its 100,000-character name, and its key
    crowded, _ = pods.expire(103.0)
    assert crowded == [big[0]]
    assert pods.unshown() == (2, footprint(big[1]) + footprint(big[2]))


def test_a_relist_leaves_filter_only_pods_to_expire():
    pods, state = PodIndex(), ClusterState()
    pods.filtered(facts("a-0"), now=100.0)
    pods.clear(state)
    assert pods.pending_pod("ml/a-0") is None and pods.unshown() == (0, 0)
    assert pods.seen_pod("ml/a-0") is not None  # until its time is up
    pods.expire(160.0)
    assert pods.seen_pod("ml/a-0") is None


def test_a_flood_of_pods_that_never_existed_stays_within_the_count():
    pods = PodIndex()
    for i in range(20_000):
        pods.filtered(facts(f"ghost-{i}", gang=f"ghost-{i % 100}"), now=100.0 + i * 1e-3)
        if i % 50 == 0:
            pods.expire(100.0 + i * 1e-3)
    pods.expire(200.0)
    assert len(pods._seen) <= MAX_UNSHOWN and len(pods) <= MAX_UNSHOWN
    assert pods.unshown()[0] <= MAX_UNSHOWN and pods.forgotten >= 20_000 - MAX_UNSHOWN
    pods.expire(1000.0)
    assert len(pods) == 0 and pods.unshown() == (0, 0) and not pods._seen_at and pods.forgotten == 20_000


def test_footprint_counts_what_a_pod_refers_to():
    small, large = facts("a"), facts("a" * 10_000)
    assert footprint(large) - footprint(small) >= 10_000
    assert footprint(("x" * 1000, {"k": "v" * 1000})) > 2000


# -- the state machine ----------------------------------------------------------------------------

NAMES = [f"p{i}" for i in range(6)]


class PodIndexMachine(RuleBasedStateMachine):
    """The index against a model: when each pod was last filtered, which pods the watch shows
    pending, and which filter alone knows (filtered while the watch did not show them pending,
    and no watch event about them since)."""

    def __init__(self) -> None:
        super().__init__()
        self.pods, self.state = PodIndex(), ClusterState()
        self.pods.max_unshown = 3
        self.now = 0.0
        self.filtered_at: dict[str, float] = {}
        self.watch_pending: set[str] = set()
        self.unshown: list[str] = []  # oldest filter call first

    def _watched(self, key: str) -> None:
        if key in self.unshown:
            self.unshown.remove(key)

    @rule(name=st.sampled_from(NAMES))
    def filter(self, name: str) -> None:
        key = f"ml/{name}"
        self.pods.filtered(facts(name), self.now)
        self.filtered_at[key] = self.now
        if key not in self.watch_pending:
            self._watched(key)
            self.unshown.append(key)

    @rule(name=st.sampled_from(NAMES))
    def watch_shows_pending(self, name: str) -> None:
        key = f"ml/{name}"
        self.pods.changed(facts(name), self.state)
        self._watched(key)
        self.watch_pending.add(key)

    @rule(name=st.sampled_from(NAMES), deleted=st.booleans())
    def watch_shows_bound_or_deleted(self, name: str, deleted: bool) -> None:
        key = f"ml/{name}"
        if deleted:
            self.pods.deleted(facts(name), self.state)
        else:
            self.pods.changed(facts(name, node="h1", phase="Running"), self.state)
        self._watched(key)
        self.watch_pending.discard(key)
        self.filtered_at.pop(key, None)

    @rule(seconds=st.sampled_from([1.0, 30.0, 59.0, 61.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        crowded, expired = self.pods.expire(self.now)
        over = len(self.unshown) - self.pods.max_unshown
        assert [p.key for p in crowded] == self.unshown[:max(over, 0)], "the oldest go first"
        del self.unshown[:max(over, 0)]
        for pod in expired:
            assert pod.key in self.unshown and self.now - self.filtered_at[pod.key] >= SEEN_TTL_SECONDS
            self.unshown.remove(pod.key)
        assert not [k for k in self.unshown if self.now - self.filtered_at[k] >= SEEN_TTL_SECONDS]
        for key, at in list(self.filtered_at.items()):
            if self.now - at >= SEEN_TTL_SECONDS or key in {p.key for p in crowded}:
                assert self.pods.seen_pod(key) is None, f"{key} remembered {self.now - at:g}s after filter"
                del self.filtered_at[key]

    @rule()
    def relist(self) -> None:
        self.pods.clear(self.state)
        self.unshown.clear()
        for key in sorted(self.watch_pending):
            self.pods.changed(facts(key.split("/")[1]), self.state)

    @invariant()
    def pods_the_watch_shows_pending_stay_pending(self) -> None:
        for key in self.watch_pending:
            assert self.pods.pending_pod(key) is not None, key

    @invariant()
    def filter_alone_knows_the_pods_the_model_says(self) -> None:
        keys = [k for k in (f"ml/{n}" for n in NAMES) if self.pods.unshown_pod(k)]
        assert sorted(keys) == sorted(self.unshown)
        assert all(self.pods.pending_pod(k) is not None for k in keys)
        assert self.pods.unshown() == (len(keys), sum(footprint(self.pods.seen_pod(k)) for k in keys))


TestPodIndexMachine = PodIndexMachine.TestCase
TestPodIndexMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
