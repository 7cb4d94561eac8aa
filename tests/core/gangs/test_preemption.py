"""Gang-aware preemption (issue 12): which domain a high-priority gang clears, and whom it evicts.

Tables over drawn topologies assert the domain and the exact victims; the reasons are asserted
with their numbers. A brute force over every subset of what may be evicted (written apart from
``core.gangs.preemption``: it only counts GPUs node by node) is the oracle of the property test.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender import topotext
from extender.adapters.kubeobjects import detect_levels
from extender.core.gangs import gangspec, preemption
from extender.core.gangs.preemption import Choice, Held, NoChoice
from extender.core.cluster.pods import PodIndex
from extender.core.cluster.state import ClusterState, Slot
from tests.adapters.kubeobjects.test_kubeobjects import documented
from tests.topologies import FOUR_NVL, TRANSLATE, pod
from tests.topologies import FOUR_NVL_NODES as NODES

NVL = "network.topology.nvidia.com/accelerator"


# Three NVLink domains of 4-GPU nodes (the property test's world).
SMALL = """
block b1
  rack r1
    nvl n1: a1[4] a2[4] a3[4]
    nvl n2: b1[4] b2[4]
  rack r2
    nvl n3: c1[4] c2[4] c3[4]
"""


class World:
    """The core's state and pod index, fed translated pods as the watch would."""

    def __init__(self, drawing: str | list[dict], running: list[dict]):
        """A drawing, or node objects."""
        nodes = [TRANSLATE.node(n) for n in (topotext.load(drawing).nodes if isinstance(drawing, str) else drawing)]
        self.state = ClusterState(detect_levels(nodes).levels)
        self.state.set_nodes(nodes)
        self.pods = PodIndex()
        for p in running:
            self.pods.changed(TRANSLATE.pod(p), self.state)

    def choose(self, pending: list[dict], held=(), **kw) -> Choice | NoChoice:
        members = [TRANSLATE.pod(p) for p in pending]
        spec = gangspec.build(members[0].gang.key, members, None, 60)
        return preemption.choose(spec, self.state.view(), members, self.pods.on_node, self.pods.bound_pods,
                               held, **kw)


def lone(name: str, node: str, gpus: int = 8, priority: int = 100, **spec) -> dict:
    return pod(name, gpus, ns="lo", node=node, priority=priority, **spec)


def running_gang(name: str, nodes: list[str], gpus: int = 8, priority: int = 100) -> list[dict]:
    return [pod(f"{name}-{i}", gpus, ns="lo", node=n, priority=priority,
                labels={"scheduling.x-k8s.io/pod-group": name}) for i, n in enumerate(nodes)]


def preemptor(count: int, gpus: int = 8, priority: int = 1000, required: str | None = "nvlink",
              name: str = "llama", **spec) -> list[dict]:
    annotations = {"railyard.io/min-member": str(count)}
    if required:
        annotations["railyard.io/required-topology"] = required
    return [pod(f"{name}-{i}", gpus, labels={"scheduling.x-k8s.io/pod-group": name}, annotations=annotations,
                priority=priority, **spec) for i in range(count)]


def full(priority: int = 100, **overrides: int) -> list[dict]:
    """One 8-GPU pod ``p-<node>`` of ``priority`` on every node (``node=priority`` overrides)."""
    return [lone(f"p-{n}", n, priority=overrides.get(n, priority)) for n in NODES]


def victims(choice: Choice) -> set[str]:
    assert isinstance(choice, Choice), choice
    return {p.key for p in choice.evict}


def where(choice: Choice) -> str:
    return "/".join(v or "-" for v in choice.domain.path)


# -- tables -------------------------------------------------------------------------------------


def test_a_full_cluster_gives_up_one_nvlink_domain_no_more_than_needed():
    choice = World(FOUR_NVL, full()).choose(preemptor(4))
    assert where(choice) == "b1/r1/n1"
    assert victims(choice) == {"lo/p-a1", "lo/p-a2", "lo/p-a3", "lo/p-a4"}
    assert choice.reason == ("evicting 4 pods of priority 100 in nvlink b1/r1/n1 to place gang ml/llama "
                             "(priority 1000): 32 GPUs needed, 0 free")


def test_two_fabrics_each_gang_clears_a_domain_of_a_pool_that_has_its_level():
    # Topograph v0.5 (12 nodes: leaves of 3 under spines S1, S4) beside GKE (8 nodes: sub-blocks
    # of 3 and 5), every node full with one low-priority pod.
    nodes = documented("topograph-v0.5", "with-block") + documented("gke", "one-block")
    names = [n["metadata"]["name"] for n in nodes]
    world = World(nodes, [lone(f"p-{n}", n) for n in names])
    leaf = world.choose(preemptor(3, required="leaf"))  # NVLink B3: leaf S5's nodes, the narrowest
    assert where(leaf) == "topograph/IB1/S4/S5/B3" and victims(leaf) == {"lo/p-Node301", "lo/p-Node302", "lo/p-Node303"}
    sub = world.choose(preemptor(3, required="subblock"))
    assert where(sub).startswith("gke/") and {v.removeprefix("lo/p-") for v in victims(sub)} == {
        "gke-a3u-pool-1", "gke-a3u-pool-2", "gke-a3u-pool-3"}
    # 13 pods: more than either pool holds; never a domain across the two.
    assert isinstance(world.choose(preemptor(13, required=None)), NoChoice)


def test_fewest_victims_wins_a_domain_that_is_partly_free():
    running = [p for p in full() if p["spec"]["nodeName"] not in ("c2", "c4")]
    choice = World(FOUR_NVL, running).choose(preemptor(4))
    assert where(choice) == "b1/r2/n3"
    assert victims(choice) == {"lo/p-c1", "lo/p-c3"}
    assert choice.reason.endswith("32 GPUs needed, 16 free")


def test_lowest_priorities_among_equal_counts():
    running = full(priority=500, b1=100, b2=100, b3=100, b4=100)
    choice = World(FOUR_NVL, running).choose(preemptor(4))
    assert where(choice) == "b1/r1/n2"
    assert victims(choice) == {"lo/p-b1", "lo/p-b2", "lo/p-b3", "lo/p-b4"}


def test_mixed_priorities_are_counted_in_the_reason():
    running = full(priority=500, b1=100, b2=100)
    choice = World(FOUR_NVL, running).choose(preemptor(4))
    assert where(choice) == "b1/r1/n2"
    assert choice.reason.startswith("evicting 4 pods (2 of priority 100, 2 of priority 500) in nvlink b1/r1/n2")


def test_one_big_pod_rather_than_two_small_ones():
    # n1: two 4-GPU pods per node; n2: one 8-GPU pod per node; the rest are of equal priority.
    running = [lone(f"q-{n}-{k}", n, gpus=4) for n in NODES[:4] for k in (1, 2)]
    running += [p for p in full(priority=2000) if not p["spec"]["nodeName"].startswith(("a", "b"))]
    running += [lone(f"p-{n}", n) for n in NODES[4:8]]
    choice = World(FOUR_NVL, running).choose(preemptor(4))
    assert where(choice) == "b1/r1/n2"
    assert len(victims(choice)) == 4


def test_mixed_sizes_on_one_node_the_fewest_victims():
    # A gang of 2 x 4 GPUs in NVLink domain n1 of 4-GPU nodes: a1 holds one 4-GPU pod of
    # priority 1, a2 two 2-GPU pods, a3 one 4-GPU pod (priority 0). Evicting a1 and a3 (2 pods) beats a2 and
    # a3 (3 pods); n2 and n3 hold pods of higher priority.
    drawing = SMALL
    running = [lone("a1-x", "a1", gpus=4, priority=1), lone("a2-x", "a2", gpus=2, priority=0),
               lone("a2-y", "a2", gpus=2, priority=0), lone("a3-x", "a3", gpus=4, priority=0)]
    running += [lone(f"{n}-x", n, gpus=4, priority=5) for n in ("b1", "b2", "c1", "c2", "c3")]
    choice = World(drawing, running).choose(preemptor(2, gpus=4, priority=2))
    assert where(choice) == "b1/r1/n1"
    assert victims(choice) == {"lo/a1-x", "lo/a3-x"}
    assert choice.reason.startswith("evicting 2 pods (1 of priority 0, 1 of priority 1) in nvlink b1/r1/n1")


def test_small_pods_of_a_gang_fit_on_one_node():
    choice = World(FOUR_NVL, full()).choose(preemptor(2, gpus=4))
    assert choice.domain.level == 3  # the host level: one node holds both
    assert victims(choice) == {"lo/p-a1"}


def test_a_running_gang_is_evicted_whole_or_not_at_all():
    # A low-priority gang runs on a1 and c1: clearing n1 through it would evict c1 too (5 pods),
    # so n2 (4 pods) is cheaper; and the gang is never broken.
    running = [p for p in full() if p["spec"]["nodeName"] not in ("a1", "c1")] + running_gang("run", ["a1", "c1"])
    choice = World(FOUR_NVL, running).choose(preemptor(4))
    assert where(choice) == "b1/r1/n2"
    assert victims(choice) == {"lo/p-b1", "lo/p-b2", "lo/p-b3", "lo/p-b4"}


def test_a_running_gang_filling_the_best_domain_goes_whole_with_its_members_outside():
    # Every other domain holds pods of higher priority: the gang on n1 (and d4) goes whole.
    running = [lone(f"p-{n}", n, priority=5000) for n in NODES if not n.startswith("a") and n != "d4"]
    running += running_gang("run", ["a1", "a2", "a3", "a4", "d4"])
    choice = World(FOUR_NVL, running).choose(preemptor(4))
    assert where(choice) == "b1/r1/n1"
    assert victims(choice) == {f"lo/run-{i}" for i in range(5)}
    assert choice.reason == (
        "evicting 5 pods of priority 100 in nvlink b1/r1/n1 to place gang ml/llama (priority 1000): "
        "32 GPUs needed, 0 free; 1 of the evicted pods run outside b1/r1/n1: members of running gangs, "
        "evicted whole so no gang runs partly")


def test_a_gang_with_one_member_of_higher_priority_is_not_touched():
    running = [lone(f"p-{n}", n, priority=5000) for n in NODES if not n.startswith("a")]
    members = running_gang("run", ["a1", "a2", "a3", "a4"])
    members[2]["spec"]["priority"] = 5000
    choice = World(FOUR_NVL, running + members).choose(preemptor(4))
    assert isinstance(choice, NoChoice)
    assert choice.reason == (
        "gang ml/llama (priority 1000) cannot preempt: best nvlink b1/r1/n1 fits 0 of 4 pods even with "
        "every pod it may evict gone (8 GPUs held by pods of priority 1000 or more, 24 by running gangs "
        "with a member of priority 1000 or more)")


def test_equal_priority_never_preempts():
    choice = World(FOUR_NVL, full(priority=1000)).choose(preemptor(4))
    assert isinstance(choice, NoChoice)
    assert choice.reason == (
        "gang ml/llama (priority 1000) cannot preempt: best nvlink b1/r1/n1 fits 0 of 4 pods even with "
        "every pod it may evict gone (32 GPUs held by pods of priority 1000 or more)")


def test_a_pod_whose_eviction_was_refused_moves_the_choice():
    world = World(FOUR_NVL, full())
    protected = {"uid-lo-p-a3"}
    choice = world.choose(preemptor(4), protected=protected)
    assert where(choice) == "b1/r1/n2"
    everywhere = {f"uid-lo-p-{n}" for n in ("a1", "b2", "c3", "d4")}
    blocked = world.choose(preemptor(4), protected=everywhere)
    assert isinstance(blocked, NoChoice)
    assert blocked.reason.endswith("fits 3 of 4 pods even with every pod it may evict gone "
                                   "(0 GPUs held by pods of priority 1000 or more, 8 by pods whose eviction "
                                   "was just refused)")


def test_a_gang_that_can_never_fit_its_nvlink_domain_gets_no_victims():
    choice = World(FOUR_NVL, full()).choose(preemptor(6))
    assert isinstance(choice, NoChoice)
    assert choice.reason == (
        "gang ml/llama (priority 1000) cannot preempt: best nvlink b1/r1/n1 fits 4 of 6 pods even with "
        "every pod it may evict gone (0 GPUs held by pods of priority 1000 or more)")


def test_preemption_policy_never_preempts_nothing():
    choice = World(FOUR_NVL, full()).choose(preemptor(4, preemptionPolicy="Never"))
    assert isinstance(choice, NoChoice)
    assert choice.reason == ("gang ml/llama does not preempt: pod ml/llama-0 has preemptionPolicy Never; "
                             "it waits for free GPUs")


def test_a_lower_priority_reservation_is_released_before_any_pod_is_evicted():
    running = [p for p in full() if not p["spec"]["nodeName"].startswith("c")]
    slots = tuple(Slot(f"lo/small-{i}", n, 8) for i, n in enumerate(["c1", "c2", "c3", "c4"]))
    world = World(FOUR_NVL, running)
    from extender.core.cluster.state import Reservation
    world.state.reserve(Reservation("lo/small", slots, 1e9))
    choice = world.choose(preemptor(4), held=[Held("lo/small", 100, slots)])
    assert where(choice) == "b1/r2/n3"
    assert victims(choice) == set()
    assert choice.release == ("lo/small",)
    assert choice.reason == ("releasing the reservation of gang lo/small (priority 100) in nvlink b1/r2/n3 "
                             "to place gang ml/llama (priority 1000): 32 GPUs needed, 0 free")
    outranks = world.choose(preemptor(4), held=[Held("lo/small", 1000, slots)])
    assert where(outranks) == "b1/r1/n1" and len(victims(outranks)) == 4


def test_pods_already_leaving_count_as_gone():
    world = World(FOUR_NVL, full())
    leaving = {f"uid-lo-p-b{i}" for i in range(1, 5)}
    choice = world.choose(preemptor(4), leaving=leaving)
    assert where(choice) == "b1/r1/n2"
    assert victims(choice) == set()
    assert choice.reason == ("waiting for the pods already leaving in nvlink b1/r1/n2 to place gang "
                             "ml/llama (priority 1000): 32 GPUs needed, 0 free, 32 being freed by earlier evictions")


def test_only_nodes_the_pods_may_use():
    # The gang's pods select pool=x, which only n4's nodes carry.
    drawing = FOUR_NVL.replace("nvl n4: d1 d2 d3 d4", "nvl n4: " + " ".join(f"d{i}[label=pool=x]" for i in range(1, 5)))
    choice = World(drawing, full()).choose(preemptor(4, nodeSelector={"pool": "x"}))
    assert where(choice) == "b1/r2/n4"


def test_cordoned_nodes_are_never_cleared():
    drawing = FOUR_NVL.replace("a2", "a2[8/8 cordoned]")
    running = [p for p in full() if p["spec"]["nodeName"] != "a2"]
    choice = World(drawing, running).choose(preemptor(4))
    assert where(choice) == "b1/r1/n2"


def test_the_view_without_the_victims_plans_the_gang_in_the_domain():
    from extender.core.placement.planner import Constraints, Placement, plan
    world = World(FOUR_NVL, full())
    members = [TRANSLATE.pod(p) for p in preemptor(4)]
    spec = gangspec.build("ml/llama", members, None, 60)
    choice = preemption.choose(spec, world.state.view(), members, world.pods.on_node, world.pods.bound_pods)
    placed = plan(spec, preemption.without(world.state.view(), choice.evict), Constraints(within=choice.domain))
    assert isinstance(placed, Placement)
    assert {s.node for s in placed.slots} == {"a1", "a2", "a3", "a4"}
    assert world.state.free("a1") == 0  # the state itself is untouched


# -- the oracle ---------------------------------------------------------------------------------

SMALL_NODES = ["a1", "a2", "a3", "b1", "b2", "c1", "c2", "c3"]
DOMAINS = {"n1": ["a1", "a2", "a3"], "n2": ["b1", "b2"], "n3": ["c1", "c2", "c3"]}


@st.composite
def small_worlds(draw):
    """Pods of 1-4 GPUs on 4-GPU nodes, lone or in gangs of two, priorities 0-3; a gang of
    2-4 pods of 1-4 GPUs, priority 2, required NVLink domain."""
    running, used = [], {n: 0 for n in SMALL_NODES}
    for k in range(draw(st.integers(0, 10))):
        size = draw(st.sampled_from([1, 2]))
        nodes = [draw(st.sampled_from(SMALL_NODES)) for _ in range(size)]
        gpus = draw(st.integers(1, 4))
        if any(used[n] + gpus > 4 for n in nodes) or len(set(nodes)) < size:
            continue
        priority = draw(st.integers(0, 3))
        for n in nodes:
            used[n] += gpus
        if size == 1:
            running.append(lone(f"s{k}", nodes[0], gpus=gpus, priority=priority))
        else:
            running += running_gang(f"g{k}", nodes, gpus=gpus, priority=priority)
    gang = preemptor(draw(st.integers(2, 4)), gpus=draw(st.integers(1, 4)), priority=2)
    return running, gang


def oracle(running: list[dict], gang: list[dict], domains: list[list[str]]) -> int | None:
    """The fewest pods evicted that let the gang fit one of ``domains`` (None: no subset of
    what may go does), by trying every subset of the lower-priority work, gangs whole."""
    count, gpus = len(gang), _gpus(gang[0])
    groups: dict[str, list[dict]] = {}
    for p in running:
        g = p["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group") or p["metadata"]["name"]
        groups.setdefault(g, []).append(p)
    takeable = [ps for ps in groups.values() if max(p["spec"]["priority"] for p in ps) < 2]
    best = None
    for subset in itertools.chain.from_iterable(itertools.combinations(takeable, r) for r in range(len(takeable) + 1)):
        gone = {p["metadata"]["name"] for ps in subset for p in ps}
        free = {n: 4 for n in SMALL_NODES}
        for p in running:
            if p["metadata"]["name"] not in gone:
                free[p["spec"]["nodeName"]] -= _gpus(p)
        if any(sum(free[n] // gpus for n in nodes) >= count for nodes in domains):
            best = len(gone) if best is None else min(best, len(gone))
    return best


def _gpus(p: dict) -> int:
    return int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_worlds())
def test_choice_against_every_subset(world_and_gang):
    running, gang = world_and_gang
    world = World(SMALL, running)
    choice = world.choose(gang)
    fewest = oracle(running, gang, list(DOMAINS.values()))
    if fewest is None:
        assert isinstance(choice, NoChoice), choice
        return
    assert isinstance(choice, Choice), (choice, fewest)
    on_one_node = oracle(running, gang, [[n] for n in SMALL_NODES])
    topo = world.state.topology
    assert choice.domain.level == (topo.depth if on_one_node is not None else topo.depth - 1), choice
    by_name = {p["metadata"]["name"]: p for p in running}
    evicted = {p.name for p in choice.evict}
    # Never equal or higher priority, never part of a running gang.
    assert all(by_name[n]["spec"]["priority"] < 2 for n in evicted)
    for p in running:
        group = p["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group")
        if group and p["metadata"]["name"] in evicted:
            assert all(q["metadata"]["name"] in evicted for q in running
                       if q["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group") == group)
    # The gang fits the chosen domain once they are gone, and no victim could be spared.
    gpus = _gpus(gang[0])
    nodes = [n for n in SMALL_NODES if choice.domain.start <= topo.index[n] < choice.domain.end]

    def fits(gone: set[str]) -> bool:
        free = {n: 4 for n in nodes}
        for p in running:
            if p["metadata"]["name"] not in gone and p["spec"]["nodeName"] in free:
                free[p["spec"]["nodeName"]] -= _gpus(p)
        return sum(f // gpus for f in free.values()) >= len(gang)

    assert fits(evicted)
    for u in choice.units:
        assert not fits(evicted - {p.name for p in u.pods}), f"{u.key} could be spared"
    best_here = on_one_node if on_one_node is not None else fewest
    assert len(evicted) >= best_here
    if all(_gpus(p) == gpus for p in running):
        # Pods the size of the gang's: the fewest victims (mixed sizes: see the table above).
        assert len(evicted) == best_here, (sorted(evicted), best_here)
    SEEN.append(len(evicted) - best_here)


SEEN: list[int] = []
