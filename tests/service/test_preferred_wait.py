"""A preferred level with a bounded wait through the real service: filter answers with an error
while the gang waits by choice (kube-scheduler retries the pod after its backoff, as for a
settling gang), tells the pods why in an Event, and steers it once its preferred level frees
or its wait ends. A manual clock, an in-memory Binder.

    rack r1:  nvl n1: a1 a2     nvl n2: b1 b2      (8 GPUs each; a1 and b1 busy)
"""

from __future__ import annotations

import pytest

from extender import topotext
from extender.core.errors import Preferring
from extender.settings import GangSettings, Settings
from tests.service.test_live import Clock, Extender, MemoryBinder
from tests.topologies import gang, pod

DRAWING = """
block b1
  rack r1
    nvl n1: a1[8/8] a2[8/8]
    nvl n2: b1[8/8] b2[8/8]
"""
NODES = ["a1", "a2", "b1", "b2"]
ASK = {"railyard.io/min-member": "2", "railyard.io/preferred-topology": "nvlink",
       "railyard.io/preferred-topology-wait-seconds": "60"}


def cluster():
    binder, clock = MemoryBinder(), Clock()
    ext = Extender(Settings(gangs=GangSettings(settle_seconds=0)), binder, clock=clock)
    ext.relisted("nodes", topotext.load(DRAWING).nodes)
    running = [pod("run-a", 8, node="a1"), pod("run-b", 8, node="b1")]
    ext.relisted("pods", running)
    ext.relisted("podgroups", [])
    return ext, clock, binder, running


def steered(ext, members, free) -> list[str]:
    for p in members:
        ext.pod_upserted(p)
    return [n for p in members for n in ext.filter(p, free).node_names]


def test_the_gang_waits_with_an_error_then_binds_in_the_nvlink_domain_that_frees():
    ext, clock, binder, running = cluster()
    members = gang("g", 2, 8, annotations=ASK)
    for p in members:
        ext.pod_upserted(p)
    with pytest.raises(Preferring, match=r"it waits 60s more \(of 60s\) for one, holding nothing, then takes a "
                                         r"wider domain: it fits now within network.topology.nvidia.com/leaf b1/r1"):
        ext.filter(members[0], ["a2", "b2"])
    assert ext.ctx.state.reservations() == {}
    assert binder.events[-1][0] == "GangPreferring"
    assert "it waits 60s more" in ext.debug_gangs()[0].reason
    clock.now += 20
    with pytest.raises(Preferring, match="it waits 40s more"):
        ext.filter(members[0], ["a2", "b2"])
    ext.pod_upserted({**running[1], "status": {"phase": "Succeeded"}})  # n2 frees within the wait
    assert steered(ext, members, ["a2", "b1", "b2"]) == ["b1", "b2"]


def test_after_the_wait_the_gang_is_steered_wider():
    ext, clock, _, _ = cluster()
    members = gang("g", 2, 8, annotations=ASK)
    with pytest.raises(Preferring):
        steered(ext, members, ["a2", "b2"])
    clock.now += 60
    assert steered(ext, members, ["a2", "b2"]) == ["a2", "b2"]
