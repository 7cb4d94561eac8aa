"""``cluster up --gpus-as-dra``: the objects it creates, checked without a cluster (the e2e tests in
tests/e2e/test_dra.py run them on the real control plane)."""

from __future__ import annotations

from extender.localcluster import dra
from extender.localcluster.nodes import NodeSet, normalize_nodes


def nodes():
    return normalize_nodes([
        {"metadata": {"name": "n1"}, "status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "64"}}},
        {"metadata": {"name": "n2"}, "status": {"capacity": {"nvidia.com/gpu": "8"},
                                                 "allocatable": {"nvidia.com/gpu": "4"}}},
        {"metadata": {"name": "cpu"}, "status": {"capacity": {"cpu": "64"}}},
    ], source="test")


def test_gpus_move_from_allocatable_to_one_slice_per_node():
    objects = dra.as_dra(NodeSet(nodes(), used_gpus={"n1": 3}))
    for node in objects.nodes:
        assert "nvidia.com/gpu" not in node["status"]["capacity"]
        assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    assert objects.nodes[0]["status"]["capacity"]["cpu"] == "64"
    assert [(s["spec"]["nodeName"], len(s["spec"]["devices"])) for s in objects.slices] == [("n1", 8), ("n2", 4)]
    assert objects.slices[0]["spec"]["devices"][5] == {
        "name": "gpu-5", "attributes": {"type": {"string": "gpu"}, "index": {"int": 5}, "rail": {"int": 5}}}
    (claim, status), = objects.claims
    assert claim["metadata"] == {"name": "fill-n1", "namespace": "railyard-fill", "labels": {
        "app.kubernetes.io/managed-by": "railyard-cluster", "railyard.io/filler": "true"}}
    assert [r["device"] for r in status["status"]["allocation"]["devices"]["results"]] == ["gpu-0", "gpu-1", "gpu-2"]


def test_the_device_class_is_nvidias():
    assert dra.DEVICE_CLASS["spec"] == {
        "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                             "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
        "extendedResourceName": "nvidia.com/gpu"}
