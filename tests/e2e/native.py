"""Kubernetes' own gang scheduling (the Workload API) as the e2e tests run it beside railyard:
kube-scheduler's feature gates and API version as bench arm C turns them on, the two profiles
(``railyard`` with the GangScheduling plugin off, railyard the only gate; ``default-scheduler``
with it on), and the 8-GPU member pods the tests make (of a Workload API group with
``scheduling_group``). Shared by test_conventions and test_kubernetes_versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from extender.localcluster import config as localconfig

from .helpers import gpu_pod

NATIVE_GATES = {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True}  # bench arm C
NATIVE_RUNTIME_CONFIG = ("scheduling.k8s.io/v1beta1=true",)
#: kube-scheduler profile names: the gang plugin off (railyard the only gate) and on.
PLUGIN_OFF, PLUGIN_ON = "railyard", "default-scheduler"
KUBERNETES = ("scheduling.k8s.io", "v1beta1")


def scheduler_config(tmp: Path) -> Path:
    """The reference configuration (as ``cluster up`` generates it), with the GangScheduling
    plugin disabled in profile ``railyard`` only."""
    config = localconfig.scheduler_config(Path("bound-by-cluster-up"), localconfig.EXTENDER_URL_PLACEHOLDER + "/scheduler")
    for profile in config["profiles"]:
        if profile["schedulerName"] == PLUGIN_OFF:
            profile["plugins"] = {"multiPoint": {"disabled": [{"name": "GangScheduling"}]}}
    path = tmp / "scheduler-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def member(name: str, *, annotations: dict[str, str] | None = None, scheduling_group: str | None = None,
           scheduler_name: str | None = None) -> dict[str, Any]:
    p = gpu_pod(name, 8, annotations=annotations, scheduler_name=scheduler_name)
    if scheduling_group:
        p["spec"]["schedulingGroup"] = {"podGroupName": scheduling_group}
    return p
