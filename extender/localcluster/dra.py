"""``cluster up --gpus-as-dra``: the nodes' GPUs published as DRA devices instead of allocatable.

What a 2026 GPU cluster with NVIDIA's DRA driver looks like to the scheduler, without a driver
(kube-scheduler allocates from ResourceSlices by itself; kwok runs the pods):

- the DeviceClass NVIDIA's chart installs (``DEVICE_CLASS``: ``extendedResourceName:
  nvidia.com/gpu``, so pods asking ``nvidia.com/gpu`` get devices, DRAExtendedResource, GA in 1.37);
- per node with ``nvidia.com/gpu`` in capacity, that resource removed from capacity and
  allocatable, and one ResourceSlice of as many devices ``gpu-0`` .. with the attributes
  ``type: gpu`` (what the class selects), ``index`` and ``rail`` (= index: a rail-optimized
  node, GPU i on rail i; made-up attributes, the API server accepts any);
- GPUs a topology marks used are held by an allocated ResourceClaim per node (namespace
  ``railyard-fill``), not a filler pod: a pod bound by name would get no devices.

Nothing here needs a feature gate or runtime-config on 1.37.2 (resource.k8s.io/v1 is served by
default). The scheduler config is the reference one: the admission policy marks gang members whose
GPUs come from claims as it marks the others (``adapters/kubeobjects/admission``), so they reach
railyard through ``managedResources`` while lone pods do not.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from extender.localcluster.nodes import FILL_NAMESPACE, NodeSet

DRIVER = "gpu.nvidia.com"
EXTENDER_SETTINGS = {"dra.rail_attribute": "rail"}
"""railyard's settings on such a cluster (unless ``--extender-set`` says otherwise): it reads the
``rail`` attribute, so gangs of partial-node members are planned rail-aligned (``core.placement.rails``)."""
GPU = "nvidia.com/gpu"
API = "/apis/resource.k8s.io/v1"
DEVICE_CLASS: dict[str, Any] = {
    # NVIDIA/k8s-dra-driver-gpu deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-gpu.yaml
    # (commit 22407113785e), as rendered for resource.k8s.io/v1.
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
    "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}' && "
                                                  f"device.attributes['{DRIVER}'].type == 'gpu'"}}],
             "extendedResourceName": GPU},
}


@dataclass(frozen=True)
class DraObjects:
    nodes: list[dict[str, Any]]
    """The nodes without ``nvidia.com/gpu``."""
    slices: list[dict[str, Any]]
    claims: list[tuple[dict[str, Any], dict[str, Any]]]
    """(claim, its status) holding the GPUs in use: the status is written after the create."""


def as_dra(node_set: NodeSet) -> DraObjects:
    nodes, slices, claims = [], [], []
    for node in node_set.nodes:
        node = copy.deepcopy(node)
        status = node["status"]
        gpus = _count(status["capacity"].pop(GPU, None))
        allocatable = _count(status["allocatable"].pop(GPU, None))
        nodes.append(node)
        gpus = min(gpus, allocatable) if allocatable else gpus
        name = node["metadata"]["name"]
        if gpus <= 0:
            continue
        slices.append(resource_slice(name, gpus))
        used = min(node_set.used_gpus.get(name, 0), gpus)
        if used:
            claims.append(fill_claim(name, used))
    return DraObjects(nodes, slices, claims)


def _count(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def resource_slice(node: str, gpus: int) -> dict[str, Any]:
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "index": {"int": i},
                                                   "rail": {"int": i}}} for i in range(gpus)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}"[:253]},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def fill_claim(node: str, gpus: int) -> tuple[dict[str, Any], dict[str, Any]]:
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": f"fill-{node}"[:253], "namespace": FILL_NAMESPACE,
                          "labels": {"app.kubernetes.io/managed-by": "railyard-cluster", "railyard.io/filler": "true"}},
             "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                 "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": gpus}}]}}}
    status = {"status": {"allocation": {
        "devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": node, "device": f"gpu-{i}"}
                                for i in range(gpus)]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}
    return claim, status
