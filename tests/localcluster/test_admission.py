"""The local cluster's side of the admission policy: nodes advertise the marker."""

from __future__ import annotations

from extender.adapters.kubeobjects import MARKER
from extender.localcluster import admission
from extender.localcluster.nodes import NodeSet


def test_nodes_advertise_the_marker_and_the_given_set_is_left_alone():
    given = NodeSet([{"metadata": {"name": "h1"}, "status": {"capacity": {"nvidia.com/gpu": "8"},
                                                             "allocatable": {"nvidia.com/gpu": "8"}}},
                     {"metadata": {"name": "h2"}}], {"h1": 2})
    marked = admission.advertised(given)
    assert [n["status"] for n in marked.nodes] == [
        {"capacity": {"nvidia.com/gpu": "8", MARKER: "1000"}, "allocatable": {"nvidia.com/gpu": "8", MARKER: "1000"}},
        {"capacity": {MARKER: "1000"}, "allocatable": {MARKER: "1000"}}]
    assert marked.used_gpus == {"h1": 2}
    assert MARKER not in given.nodes[0]["status"]["capacity"] and "status" not in given.nodes[1]
