"""Topologies drawn as text (the drawing is the data) and builders for pods, shared by tests."""

from __future__ import annotations

from typing import Any

from extender import topotext
from extender.adapters import kubeobjects as ko
from extender.settings import DEFAULT_GPU_RESOURCE
from extender.service.whatif import WhatIf

TRANSLATE = ko.Translator(DEFAULT_GPU_RESOURCE)

TWO_RACKS = """
block b1
  rack r1
    nvl n1: h1[8/8] h2[8/8]
    nvl n2: h3[8/8] h4[2/8]
  rack r2
    nvl n3: h5[8/8] h6[0/8]
"""

# Rack and NVLink names repeat under different parents: they must never merge.
REPEATED_NAMES = """
block b1
  rack r1
    nvl n1: a1 a2
block b2
  rack r1
    nvl n1: c1 c2
"""

BLOCKED = """
block b1
  rack r1
    nvl n1: h1[8/8 cordoned] h2 h3[8/8 notready] h4
    nvl n2: h5[8/8 taint=dedicated=train:NoSchedule] h6 h7 h8
"""

# h5 and h6 lack the NVLink label; h7 lacks every label below the block.
MISSING_LABELS = """
block b1
  rack r1
    nvl n1: h1 h2
    nodes: h5 h6
  nodes: h7
"""

# Four NVLink domains of four 8-GPU nodes, two per rack (the preemption tests' cluster).
FOUR_NVL = """
block b1
  rack r1
    nvl n1: a1 a2 a3 a4
    nvl n2: b1 b2 b3 b4
  rack r2
    nvl n3: c1 c2 c3 c4
    nvl n4: d1 d2 d3 d4
"""
FOUR_NVL_NODES = [f"{x}{i}" for x in "abcd" for i in range(1, 5)]

FOUR_LEVELS = """
scheme topograph
core c1
  spine s1
    leaf l1
      nvl n1: x1 x2 x3 x4
      nvl n2: x5 x6 x7 x8
    leaf l2
      nvl n3: x9 x10 x11 x12
  spine s2
    leaf l1
      nvl n4: y1 y2 y3 y4
"""


def cluster(drawing: str, levels: list[str] | None = None, pods: list[dict] = (),
            podgroups: list[dict] = ()) -> "Cluster":
    """The drawing as a what-if cluster, translated as ``railyard plan`` translates files."""
    spec = topotext.load(drawing)
    nodes = [TRANSLATE.node(n) for n in spec.nodes]
    choice = ko.explicit_levels(levels) if levels else ko.detect_levels(nodes)
    return Cluster.load(nodes, choice, facts([*spec.filler_pods(), *pods]), [TRANSLATE.group(g) for g in podgroups])


class Cluster(WhatIf):
    """A what-if cluster that takes pending pods as Kubernetes objects (translated first)."""

    def plan_pending(self, pending):
        return super().plan_pending(facts(list(pending)))


def facts(pods: list[dict]) -> list:
    return [TRANSLATE.pod(p) for p in pods]


def gang(name: str, count: int, gpus: int, ns: str = "ml", annotations: dict[str, str] | None = None,
         labels: dict[str, str] | None = None, start: int = 0, **spec: Any) -> list[dict[str, Any]]:
    """Pods of one gang (scheduler-plugins label), ``<name>-<i>``."""
    return [
        pod(f"{name}-{i}", gpus, ns=ns,
            labels={"scheduling.x-k8s.io/pod-group": name, **(labels or {})},
            annotations=annotations, **spec)
        for i in range(start, start + count)
    ]


def pod(name: str, gpus: int, ns: str = "ml", labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, node: str | None = None, **spec: Any) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    body: dict[str, Any] = {"containers": [{"name": "main", "image": "train", "resources": resources}], **spec}
    if node:
        body["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}",
                     "labels": dict(labels or {}), "annotations": dict(annotations or {})},
        "spec": body,
        "status": {"phase": "Running" if node else "Pending"},
    }
