"""NodeList input: taken as given, completed only where a kubelet would have reported."""

from __future__ import annotations

import json

import pytest

from extender.localcluster import nodes
from extender.localcluster.errors import ClusterError


def _node(name, **status):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": status}


def test_nodelist_json_keeps_labels_taints_and_cordon(tmp_path):
    node = _node("g1", capacity={"nvidia.com/gpu": "8"}, allocatable={"nvidia.com/gpu": "7"})
    node["metadata"]["labels"] = {"network.topology.nvidia.com/leaf": "l1"}
    node["spec"] = {"unschedulable": True, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}
    node["metadata"]["uid"] = "abc"
    node["metadata"]["resourceVersion"] = "12"
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": [node]}))
    (out,) = nodes.load_node_list(path).nodes
    assert out["spec"] == node["spec"]
    assert out["metadata"]["labels"]["network.topology.nvidia.com/leaf"] == "l1"
    assert out["metadata"]["labels"]["kubernetes.io/hostname"] == "g1"
    assert "uid" not in out["metadata"] and "resourceVersion" not in out["metadata"]
    assert out["status"]["allocatable"]["nvidia.com/gpu"] == "7"
    assert out["status"]["capacity"]["nvidia.com/gpu"] == "8"


def test_missing_allocatable_pods_and_ready_are_filled(tmp_path):
    path = tmp_path / "nodes.yaml"
    path.write_text("kind: NodeList\nitems:\n- metadata: {name: g1}\n  status: {capacity: {nvidia.com/gpu: '8'}}\n")
    (out,) = nodes.load_node_list(path).nodes
    assert out["status"]["allocatable"] == {"nvidia.com/gpu": "8", "cpu": "1k", "memory": "1Ti", "pods": "110"}
    assert [c["type"] for c in out["status"]["conditions"]] == ["Ready"]
    assert out["status"]["conditions"][0]["status"] == "True"


def test_a_not_ready_node_stays_not_ready_and_gets_the_lifecycle_taint(tmp_path):
    node = _node("g1", conditions=[{"type": "Ready", "status": "False"}])
    node["spec"] = {"taints": [{"key": "k", "effect": "NoExecute"}]}
    (out,) = nodes.normalize_nodes([node], "t")
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "False"}]
    assert out["spec"]["taints"] == [{"key": "k", "effect": "NoExecute"},
                                     {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    unknown = _node("g2", conditions=[{"type": "Ready", "status": "Unknown"}])
    (out,) = nodes.normalize_nodes([unknown], "t")
    assert out["spec"]["taints"] == [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]


def test_a_ready_node_gets_no_taint():
    (out,) = nodes.normalize_nodes([_node("g1")], "t")
    assert "taints" not in out.get("spec", {})


def test_yaml_stream_of_single_nodes(tmp_path):
    path = tmp_path / "nodes.yaml"
    path.write_text("kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: b}\n")
    assert nodes.load_node_list(path).names == ["a", "b"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "holds no nodes"),
        ("kind: NodeList\nitems: []\n", "holds no nodes"),
        ("{not yaml: [", "neither JSON nor YAML"),
        ("kind: NodeList\nitems: [{metadata: {}}]\n", "has no metadata.name"),
        ("kind: NodeList\nitems: [{kind: Pod, metadata: {name: p}}]\n", "is a Pod, not a Node"),
        ("kind: NodeList\nitems: [{metadata: {name: a}}, {metadata: {name: a}}]\n", "node a appears twice"),
        ("kind: NodeList\nitems: [3]\n", "is not an object"),
    ],
)
def test_bad_node_files_say_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "nodes.yaml"
    path.write_text(text)
    with pytest.raises(ClusterError, match=message):
        nodes.load_node_list(path)


def test_unreadable_file(tmp_path):
    with pytest.raises(ClusterError, match="cannot read nodes file .*missing.yaml"):
        nodes.load_node_list(tmp_path / "missing.yaml")


def test_filler_pod_holds_the_used_gpus_on_its_node():
    pod = nodes.filler_pod("h4", 6)
    assert pod["metadata"]["namespace"] == nodes.FILL_NAMESPACE
    assert pod["spec"]["nodeName"] == "h4"
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["requests"] == {"nvidia.com/gpu": "6"}
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "6"}


def test_default_topology_is_the_generator_line():
    node_set = nodes.load_topology(nodes.DEFAULT_TOPOLOGY)
    assert len(node_set.nodes) == 2 * 4 * 2 * 4
    assert all(n["status"]["allocatable"]["nvidia.com/gpu"] == "8" for n in node_set.nodes)


def test_drawn_topology_file_gives_used_gpus(tmp_path):
    path = tmp_path / "topo.txt"
    path.write_text("block b1\n  rack r1\n    nvl n1: h1 h2[2/8 cordoned]\n")
    node_set = nodes.load_topology(str(path))
    assert node_set.names == ["h1", "h2"]
    assert node_set.used_gpus == {"h2": 6}
    assert node_set.nodes[1]["spec"]["unschedulable"] is True


def test_bad_topology_input(tmp_path):
    with pytest.raises(ClusterError, match="cannot read topology file .*nope.txt"):
        nodes.load_topology(str(tmp_path / "nope.txt"))
    path = tmp_path / "topo.txt"
    path.write_text("block b1\n  rack r1\n    nvl n1: h1[9/8]\n")
    with pytest.raises(ClusterError, match="bad topology .*9 free of 8"):
        nodes.load_topology(str(path))


def test_items_must_be_a_list(tmp_path):
    path = tmp_path / "nodes.json"
    path.write_text('{"kind": "NodeList", "items": {"a": 1}}')
    with pytest.raises(ClusterError, match="items is not a list"):
        nodes.load_node_list(path)


def test_a_thousand_node_json_list_loads_fast(tmp_path):
    import time

    items = [{"metadata": {"name": f"n{i}", "labels": {"a": "b"}},
              "status": {"capacity": {"nvidia.com/gpu": "8"}}} for i in range(1000)]
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "NodeList", "items": items}))
    started = time.monotonic()
    assert len(nodes.load_node_list(path).nodes) == 1000
    assert time.monotonic() - started < 2
