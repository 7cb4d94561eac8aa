"""Nodes to NodeFacts."""

from __future__ import annotations

from typing import Any, Mapping

from extender.adapters.kubeobjects.fields import dict_at, labels_of, list_at, str_at
from extender.adapters.kubeobjects.labels import fabric_of
from extender.adapters.kubeobjects.resources import node_allocatable
from extender.core.model import NodeFacts, Taint


def node_facts(node: Mapping[str, Any], gpu_resource: str) -> NodeFacts:
    meta, spec, status = dict_at(node, "metadata"), dict_at(node, "spec"), dict_at(node, "status")
    ready = True
    for cond in list_at(status, "conditions"):
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    taints = tuple(
        Taint(str_at(t, "key"), str_at(t, "value"), str_at(t, "effect"))
        for t in list_at(spec, "taints")
        if isinstance(t, dict)
    )
    gpus, allocatable = node_allocatable(node, gpu_resource)
    labels = labels_of(node)
    return NodeFacts(
        name=str_at(meta, "name"),
        labels=labels,
        fabric=fabric_of(labels),
        gpus=gpus,
        unschedulable=spec.get("unschedulable") is True,
        ready=ready,
        taints=taints,
        allocatable=allocatable,
    )
