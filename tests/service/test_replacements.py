"""A replacement member gets the full address of the member it replaces (issue 20 item 4): its
rank in the whole gang, the slice of that rank, and its domains, landing in its slice's domain
when it fits. The service with an in-memory API server (``test_live``)."""

from __future__ import annotations

from tests.service.test_live import bind_async, create, extender
from tests.topologies import gang

# One slice fills n2 exactly, the other takes two of n1's three nodes: one n1 node stays free.
RACK = """
block b1
  rack r1
    nvl n1: h0[8/8] h1[8/8] h2[8/8]
    nvl n2: h3[8/8] h4[8/8]
"""
NODES = ["h0", "h1", "h2", "h3", "h4"]
SLICED = {"railyard.io/min-member": "4", "railyard.io/slice-size": "2",
          "railyard.io/slice-required-topology": "nvlink"}
INDEX = "batch.kubernetes.io/job-completion-index"


def job(count=4, start=0):
    pods = gang("g", count, 8, annotations=SLICED, start=start)
    for i, p in enumerate(pods, start):
        p["metadata"]["labels"][INDEX] = str(i)
    return pods


def test_a_replacement_takes_the_lost_members_rank_slice_and_slice_domain():
    ext, binder, _ = extender(RACK)
    pods = job()
    create(ext, pods)
    plan = {}
    for p in pods:
        (plan[p["metadata"]["name"]],) = ext.filter(p, NODES).node_names
    errors = {}
    for t in [bind_async(ext, p, plan[p["metadata"]["name"]], errors) for p in pods]:
        t.join(5)
    assert errors == {}
    for p in pods:  # the watch shows them running
        p["spec"]["nodeName"] = plan[p["metadata"]["name"]]
        p["status"]["phase"] = "Running"
        ext.pod_upserted(p)
    free = set(NODES) - set(plan.values())
    assert free == {"h0", "h1", "h2"} - set(plan.values()) and len(free) == 1  # one spare node, in n1
    # A member of the slice that fills n2 (h3, h4): the spare n1 node is beside it in the rack.
    i = next(i for i, p in enumerate(pods) if plan[p["metadata"]["name"]] in {"h3", "h4"})
    lost = binder.marks[f"ml/g-{i}"].address
    assert lost.rank == i and lost.slice == i // 2  # the first round's ranks: the completion indexes
    assert {pl.name: pl.domain for pl in lost.domains}["nvlink"] == "b1/r1/n2"
    ext.pod_deleted(pods[i])
    (again,) = job(1, start=i)
    again["metadata"]["uid"] = f"uid-ml-g-{i}-again"
    create(ext, [again])
    (node,) = ext.filter(again, NODES).node_names
    assert node == lost.node  # its slice's NVLink domain, not the free node beside it in the rack
    t = bind_async(ext, again, node, errors)
    t.join(5)
    assert errors == {}
    got = binder.marks[f"ml/g-{i}"].address
    assert (got.rank, got.slice, got.domains) == (lost.rank, lost.slice, lost.domains)
