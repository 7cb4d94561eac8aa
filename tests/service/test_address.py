"""Every member of a gang is marked with its topology address (rank, slice, domain per level)
before its Binding, and /debug/gangs and explain show the same mapping: the live service with
an in-memory Binder."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.adapters.kubeobjects import binding_annotations
from extender.core.model import Place
from extender.service.answers import Slices
from extender import topotext
from extender.adapters.kubeobjects.workloads import JOBSETS
from tests.adapters.kubeobjects.test_workloads import jobset, jobset_pods, rjob
from tests.service.test_live import SETTINGS, Clock, Extender, MemoryBinder, bind_async, create, extender, wait_until
from tests.topologies import gang

# NVLink domain n1 has 2 free nodes, n2 has 3: 4 pods in slices of 2 take n1 whole and 2 of n2.
DRAWING = """
block b1
  rack r1
    nvl n1: h1 h2 h3[0/8]
    nvl n2: h4 h5 h6
"""
NODES = ["h1", "h2", "h3", "h4", "h5", "h6"]
SLICED = {"railyard.io/slice-size": "2", "railyard.io/slice-required-topology": "nvlink",
          "railyard.io/required-topology": "leaf", "railyard.io/min-member": "4"}


def members(annotations=SLICED, count=4):
    pods = gang("g", count, 8, annotations=annotations)
    for i, p in enumerate(pods):
        p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = str(i)
    return pods


def written(binder, key):
    """The address annotations the member's mark writes (the Binding round left out)."""
    return {k: v for k, v in binding_annotations(binder.marks[key]).items() if k != "railyard.io/binding"}


def annotations(rank, slice_, nvlink):
    return {"railyard.io/rank": str(rank), **({"railyard.io/slice": str(slice_)} if slice_ is not None else {}),
            "railyard.io/domain.spine": "b1", "railyard.io/domain.leaf": "b1/r1",
            "railyard.io/domain.nvlink": f"b1/r1/{nvlink}"}


def bind_all(ext, pods, plan):
    errors = {}
    threads = [bind_async(ext, p, plan[f"ml/{p['metadata']['name']}"], errors) for p in pods]
    for t in threads:
        t.join(5)
    assert errors == {}


def steer(ext, pods):
    create(ext, pods)
    return {f"ml/{p['metadata']['name']}": ext.filter(p, NODES).node_names[0] for p in pods}


def test_every_member_is_marked_with_its_rank_slice_and_domains_before_its_binding():
    ext, binder, _ = extender(DRAWING)
    pods = members()
    plan = steer(ext, pods)
    assert plan == {"ml/g-0": "h1", "ml/g-1": "h2", "ml/g-2": "h4", "ml/g-3": "h5"}
    bind_all(ext, pods, plan)
    assert sorted(binder.marks) == sorted(key for key, _ in binder.bound)
    assert {key: written(binder, key) for key in binder.marks} == {
        "ml/g-0": annotations(0, 0, "n1"), "ml/g-1": annotations(1, 0, "n1"),
        "ml/g-2": annotations(2, 1, "n2"), "ml/g-3": annotations(3, 1, "n2"),
    }


def test_an_unsliced_gang_gets_ranks_and_domains_but_no_slice():
    ext, binder, _ = extender(DRAWING)
    pods = members({"railyard.io/min-member": "2"}, count=2)
    bind_all(ext, pods, steer(ext, pods))
    assert written(binder, "ml/g-1") == annotations(1, None, "n1")


def test_a_member_created_after_planning_gets_the_rank_of_the_slot_it_takes():
    ext, binder, _ = extender(DRAWING)
    pods = members()
    plan = steer(ext, pods[:3])  # planned for 4: the fourth slot waits under the name ml/g#1
    plan.update(steer(ext, pods[3:]))
    bind_all(ext, pods, plan)
    assert written(binder, "ml/g-3") == annotations(3, 1, "n2")
    assert [r.pod for r in ext.debug_gangs()[0].ranks] == ["ml/g-0", "ml/g-1", "ml/g-2", "ml/g-3"]


def test_debug_gangs_and_explain_show_rank_pod_node_and_domains():
    ext, _, clock = extender(DRAWING)
    pods = members({**SLICED, "railyard.io/timeout-seconds": "30"})
    plan = steer(ext, pods)
    errors = {}
    t = bind_async(ext, pods[0], plan["ml/g-0"], errors)
    wait_until(lambda: ext.debug_gangs()[0].phase.startswith("waiting"))
    (gang_view,) = ext.debug_gangs()
    assert gang_view.slices == Slices(size=2, level="network.topology.nvidia.com/accelerator", count=2)
    assert [(r.rank, r.slice, r.pod, r.node, r.domains[-1].domain) for r in gang_view.ranks] == [
        (0, 0, "ml/g-0", "h1", "b1/r1/n1"), (1, 0, "ml/g-1", "h2", "b1/r1/n1"),
        (2, 1, "ml/g-2", "h4", "b1/r1/n2"), (3, 1, "ml/g-3", "h5", "b1/r1/n2")]
    assert gang_view.ranks[0].domains == (
        Place(level="network.topology.nvidia.com/spine", name="spine", domain="b1"),
        Place(level="network.topology.nvidia.com/leaf", name="leaf", domain="b1/r1"),
        Place(level="network.topology.nvidia.com/accelerator", name="nvlink", domain="b1/r1/n1"))
    got = ext.explain("ml/g-2")
    assert got.ranks == gang_view.ranks and got.slices == gang_view.slices
    # The fit table, with the gang's own reservation given back: r1 holds both slices.
    assert [(f.domain.path, f.fits, f.slices) for f in got.fit] == [(("b1", "r1"), 4, 2)]
    clock.now += 31
    t.join(5)


def test_explain_a_sliced_gang_that_cannot_be_placed_counts_whole_slices():
    ext, _, _ = extender(DRAWING)
    pods = members({**SLICED, "railyard.io/slice-size": "4"})
    create(ext, pods)
    ext.filter(pods[0], NODES)
    got = ext.explain("ml/g-0")
    assert got.reason == (
        "gang ml/g needs 4 pods x 8 GPUs in 1 slice of 4 pods, each within one "
        "network.topology.nvidia.com/accelerator, all within one network.topology.nvidia.com/leaf; "
        "best leaf b1/r1 holds 0 of 1 slices: it fits 4 pods, but only 0 in whole slices (8 GPUs in use)")
    assert got.slices == Slices(size=4, level="network.topology.nvidia.com/accelerator", count=1)
    assert got.ranks == ()
    assert [(f.fits, f.slices) for f in got.fit] == [(4, 0)]


@settings(max_examples=30)
@given(order=st.permutations(range(5)), first=st.integers(1, 4))
def test_members_created_in_any_order_are_told_their_completion_index_in_fabric_order(order, first):
    """A Job's controller creates its pods in no set order and railyard plans the gang at the
    first one's filter. Whatever the order, the pod with completion index i is told rank i and
    sits on the i-th free node in the fabric's order (the drawing's: h1 h2 | h4 h5 h6), so its
    launcher's rank (the index) follows the fabric."""
    ext, _, _ = extender(DRAWING)
    pods = members({"railyard.io/min-member": "5"}, count=5)
    created = [pods[i] for i in order]
    plan = steer(ext, created[:first])
    plan.update(steer(ext, created[first:]))
    free = ["h1", "h2", "h4", "h5", "h6"]
    assert plan == {f"ml/g-{i}": free[i] for i in range(5)}
    (gang_view,) = ext.debug_gangs()
    assert [(r.rank, r.pod, r.node) for r in gang_view.ranks] == [(i, f"ml/g-{i}", free[i]) for i in range(5)]


def test_a_jobsets_pods_created_in_any_order_are_told_their_place_in_global_index_order():
    """A JobSet's size and its Jobs' sizes come from the JobSet object; the workers' pods come
    first here, the leader's last (JobSet creates its Jobs in no order railyard may rely on):
    each pod is told the rank of its (global Job index, completion index) all the same."""
    drawing = "block b1\n  rack r1\n    nvl n1: a1 a2 a3\n    nvl n2: b1 b2 b3\n"
    binder, clock = MemoryBinder(), Clock()
    ext = Extender(SETTINGS, binder, clock=clock, kinds=("nodes", "pods", "podgroups", JOBSETS))
    ext.relisted("nodes", topotext.load(drawing).nodes)
    ext.relisted("pods", [])
    ext.relisted("podgroups", [])
    ext.relisted(JOBSETS, [jobset("train", [rjob("leader", 1, 2), rjob("workers", 2, 2)])])
    pods = jobset_pods("train", [("leader", 1, 2), ("workers", 2, 2)])  # global index order
    for p in pods:
        p["metadata"]["uid"] = f"uid-{p['metadata']['name']}"
    nodes = ["a1", "a2", "a3", "b1", "b2", "b3"]
    created = [pods[5], pods[2], pods[4], pods[0], pods[3], pods[1]]
    plan = {}
    for p in created:
        ext.pod_upserted(p)
        plan[p["metadata"]["name"]] = ext.filter(p, nodes).node_names
    assert plan == {p["metadata"]["name"]: (node,) for p, node in zip(pods, nodes)}
    (gang_view,) = ext.debug_gangs()
    assert [(r.rank, r.pod) for r in gang_view.ranks] == [(i, f"ml/{p['metadata']['name']}")
                                                          for i, p in enumerate(pods)]
