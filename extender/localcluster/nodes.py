"""The fake GPU nodes: read from a NodeList file or a text topology, made ready to create.

A node is created exactly as given (labels, capacity, allocatable, ``spec.unschedulable``,
taints). Only what a kubelet would always have reported is filled in when missing, because
without it the real scheduler rejects every pod:

- ``status.allocatable`` missing -> a copy of ``status.capacity``;
- ``pods`` missing -> 110 (kubelet's default max-pods; with no ``pods`` the scheduler fits 0);
- ``cpu`` / ``memory`` missing -> kwok's own defaults (1k CPUs, 1Ti), so CPU or memory
  requests never decide placement in a GPU simulation unless the file says so;
- no ``Ready`` condition -> Ready=True (there is no kubelet heartbeat; nothing turns a
  node NotReady unless the file does);
- ``Ready`` False or Unknown -> the ``node.kubernetes.io/not-ready`` or ``.../unreachable``
  NoSchedule taint, as the node lifecycle controller would add (there is none here, and the
  API server runs without TaintNodesByCondition, which would taint every new node).

Server-set metadata (uid, resourceVersion, creationTimestamp, managedFields) is dropped, so a
``kubectl get nodes -o yaml`` dump of a real cluster can be replayed.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from extender.localcluster.errors import ClusterError

DEFAULT_TOPOLOGY = "blocks=2 racks=4 nvl=2 nodes=4 gpus=8 scheme=topograph"
FILL_NAMESPACE = "railyard-fill"
_SERVER_SET_METADATA = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink")
_DEFAULT_RESOURCES = {"cpu": "1k", "memory": "1Ti", "pods": "110"}
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML has it


@dataclass(frozen=True)
class NodeSet:
    """Nodes to create and the GPUs already in use on each (served by filler pods)."""

    nodes: list[dict[str, Any]]
    used_gpus: dict[str, int] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.nodes]


def load_node_list(path: Path) -> NodeSet:
    """Parse a NodeList (or List, single Node, or YAML stream of Nodes) from JSON or YAML."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ClusterError(f"cannot read nodes file {path}: {exc.strerror or exc}") from exc
    try:
        # JSON first: a 1,000-node list takes PyYAML's pure-Python parser seconds.
        docs = [json.loads(text)]
    except ValueError:
        try:
            docs = [d for d in yaml.load_all(text, Loader=_YAML_LOADER) if d is not None]
        except yaml.YAMLError as exc:
            raise ClusterError(f"nodes file {path} is neither JSON nor YAML: {_first_line(exc)}") from exc
    items: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and (doc.get("kind") in ("NodeList", "List") or ("items" in doc and "kind" not in doc)):
            listed = doc.get("items") or []
            if not isinstance(listed, list):
                raise ClusterError(f"nodes file {path}: items is not a list")
            items.extend(listed)
        else:
            items.append(doc)
    return NodeSet(nodes=normalize_nodes(items, source=str(path)))


def load_topology(path_or_text: str | Path) -> NodeSet:
    """Nodes from the text topology format (``extender/topotext.py``)."""
    try:
        from extender import topotext  # owned by the lead; may land after this module
    except ModuleNotFoundError as exc:
        if exc.name not in ("extender.topotext",):
            raise
        raise ClusterError(
            "--topology needs extender/topotext.py, which this checkout does not have yet; use --nodes FILE"
        ) from exc
    text = str(path_or_text)
    is_generator = "\n" not in text and bool(text.split()) and all("=" in w for w in text.split())
    if not is_generator and "\n" not in text and not Path(text).is_file():
        raise ClusterError(f"cannot read topology file {text}: no such file (or give a generator line "
                           f"such as {DEFAULT_TOPOLOGY!r})")
    try:
        spec = topotext.load(path_or_text)
    except ValueError as exc:  # topotext.TopologyTextError, including unreadable files
        raise ClusterError(f"bad topology {path_or_text}: {exc}") from exc
    nodes = normalize_nodes(list(spec.nodes), source=str(path_or_text))
    used = {name: int(n) for name, n in dict(spec.used_gpus).items() if int(n) > 0}
    unknown = sorted(set(used) - {n["metadata"]["name"] for n in nodes})
    if unknown:
        raise ClusterError(f"topology {path_or_text} marks GPUs used on unknown nodes: {', '.join(unknown)}")
    return NodeSet(nodes=nodes, used_gpus=used)


def normalize_nodes(items: list[Any], source: str) -> list[dict[str, Any]]:
    """Validate ``items`` as Nodes and fill in what a kubelet always reports (module docstring)."""
    if not items:
        raise ClusterError(f"{source} holds no nodes")
    nodes = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        where = f"{source}: item {index}"
        if not isinstance(item, dict):
            raise ClusterError(f"{where} is not an object")
        if item.get("kind", "Node") != "Node":
            raise ClusterError(f"{where} is a {item.get('kind')}, not a Node")
        node = copy.deepcopy(item)
        meta = node.setdefault("metadata", {}) or {}
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise ClusterError(f"{where} has no metadata.name")
        if name in seen:
            raise ClusterError(f"{source}: node {name} appears twice")
        seen.add(name)
        node["apiVersion"] = "v1"
        node["kind"] = "Node"
        for key in _SERVER_SET_METADATA:
            meta.pop(key, None)
        meta.setdefault("labels", {})
        meta["labels"].setdefault("kubernetes.io/hostname", name)
        status = node.get("status") or {}
        node["status"] = status
        capacity = dict(status.get("capacity") or {})
        allocatable = dict(status.get("allocatable") or capacity)
        for key, value in _DEFAULT_RESOURCES.items():
            capacity.setdefault(key, value)
            allocatable.setdefault(key, value)
        status["capacity"], status["allocatable"] = capacity, allocatable
        conditions = list(status.get("conditions") or [])
        if not any(isinstance(c, dict) and c.get("type") == "Ready" for c in conditions):
            conditions.append({
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kwok fake node (railyard local cluster)",
            })
        status["conditions"] = conditions
        _taint_if_not_ready(node, conditions)
        nodes.append(node)
    return nodes


def _taint_if_not_ready(node: dict[str, Any], conditions: list[Any]) -> None:
    ready = next((c.get("status") for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"), "True")
    if ready == "True":
        return
    key = "node.kubernetes.io/not-ready" if ready == "False" else "node.kubernetes.io/unreachable"
    spec = node.get("spec") or {}
    node["spec"] = spec
    taints = list(spec.get("taints") or [])
    if not any(isinstance(t, dict) and t.get("key") == key and t.get("effect") == "NoSchedule" for t in taints):
        taints.append({"key": key, "effect": "NoSchedule"})
    spec["taints"] = taints


def filler_pod(node: str, gpus: int, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    """A pod bound straight to ``node`` that holds ``gpus`` GPUs, so "used" is real load."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"fill-{node}"[:253],
            "namespace": FILL_NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "railyard-cluster", "railyard.io/filler": "true"},
        },
        "spec": {
            "nodeName": node,
            # Already placed: taints and cordons of the node do not apply to it.
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "fill",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {resource: str(gpus)}, "limits": {resource: str(gpus)}},
            }],
        },
    }


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()
