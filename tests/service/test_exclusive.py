"""An exclusive gang through the real service: its domain is kept from lone pods while it runs
and opens once the watch shows its last pod gone. A manual clock, an in-memory Binder.

    rack r1:  nvl n1: a1 a2     nvl n2: b1 b2      (8 GPUs each; b1 runs a 1-GPU pod)
"""

from __future__ import annotations

from extender import topotext
from tests.service.test_live import Clock, Extender, MemoryBinder, bind_async
from tests.topologies import gang, pod
from extender.settings import GangSettings, Settings

DRAWING = """
block b1
  rack r1
    nvl n1: a1[8/8] a2[8/8]
    nvl n2: b1[8/8] b2[8/8]
"""
NODES = ["a1", "a2", "b1", "b2"]


def test_the_domain_is_kept_from_lone_pods_until_the_gangs_last_pod_is_gone():
    clock = Clock()
    ext = Extender(Settings(gangs=GangSettings(settle_seconds=0)), MemoryBinder(), clock=clock)
    ext.relisted("nodes", topotext.load(DRAWING).nodes)
    ext.relisted("pods", [pod("run-b", 1, node="b1")])
    ext.relisted("podgroups", [])
    members = gang("x", 1, 4, annotations={"railyard.io/exclusive-topology": "nvlink"})
    ext.pod_upserted(members[0])
    node = ext.filter(members[0], NODES).node_names[0]
    assert node in ("a1", "a2")  # n2 has a GPU in use
    errors: dict = {}
    bind_async(ext, members[0], node, errors).join(5)
    assert errors == {}
    bound = {**members[0], "spec": {**members[0]["spec"], "nodeName": node}, "status": {"phase": "Running"}}
    ext.pod_upserted(bound)
    clock.now += 30
    verdict = ext.filter(pod("lone", 1), NODES)
    assert sorted(verdict.failed) == ["a1", "a2"] and verdict.node_names == ("b1", "b2")
    ext.pod_deleted(bound)
    clock.now += 1
    assert ext.filter(pod("lone", 1), NODES).node_names == tuple(NODES)
