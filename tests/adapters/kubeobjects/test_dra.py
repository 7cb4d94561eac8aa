"""DRA objects to facts (``adapters/kubeobjects/dra.py``), on objects kube-scheduler 1.37.2 made or
accepted and on NVIDIA's own DeviceClass (tests/fixtures/dra/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from extender.adapters.kubeobjects import Translator
from extender.adapters.kubeobjects.dra import parse_selector, pod_claims
from extender.core.devices.facts import DRIVER, AllocatedDevice, DeviceRequest, Match
from extender.core.model import PodClaim

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dra"
T = Translator("nvidia.com/gpu")


def fixture(name):
    text = (FIXTURES / name).read_text()
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


def test_nvidia_device_class_reads_driver_and_type():
    cls = T.dra("DeviceClass", fixture("deviceclass-nvidia-gpu.yaml"))
    assert cls.name == "gpu.nvidia.com" and cls.extended_resource == "nvidia.com/gpu"
    assert cls.selectors == ((Match(DRIVER, "gpu.nvidia.com"), Match("gpu.nvidia.com/type", "gpu")),)
    assert cls.unread == () and cls.drivers == {"gpu.nvidia.com"}


@pytest.mark.parametrize("expression, matches, unread", [
    ('device.driver == "gpu.nvidia.com"', (Match(DRIVER, "gpu.nvidia.com"),), ()),
    ("'gpu.nvidia.com' == device.driver", (Match(DRIVER, "gpu.nvidia.com"),), ()),
    ("device.attributes['gpu.nvidia.com']['productName'] != 'NVIDIA A10'",
     (Match("gpu.nvidia.com/productName", "NVIDIA A10", equal=False),), ()),
    ("(device.attributes['dra.example.com'].rail == 3) && device.attributes['dra.example.com'].nvl == true",
     (Match("dra.example.com/rail", 3), Match("dra.example.com/nvl", True)), ()),
    ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].rail < 4",
     (Match(DRIVER, "gpu.nvidia.com"),), ("device.attributes['gpu.nvidia.com'].rail < 4",)),
    ("device.driver == 'a' || device.driver == 'b'", (), ("device.driver == 'a' || device.driver == 'b'",)),
    ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", (),
     ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",)),
])
def test_selectors_read_and_unread(expression, matches, unread):
    assert parse_selector(expression) == (matches, unread)


def test_resource_slice_devices_with_qualified_attributes():
    s = T.dra("ResourceSlice", fixture("slice-n1.json"))
    assert (s.name, s.driver, s.pool, s.generation, s.node) == ("n1-gpu.nvidia.com", "gpu.nvidia.com", "n1", 1, "n1")
    assert [d.name for d in s.devices] == [f"gpu-{i}" for i in range(8)]
    assert s.devices[3].attributes == {"gpu.nvidia.com/index": 3, "gpu.nvidia.com/uuid": "GPU-n1-0003",
                                       "gpu.nvidia.com/rail": 3, "gpu.nvidia.com/productName": "NVIDIA H100 80GB HBM3"}


def test_the_claim_kube_scheduler_makes_for_extended_resources():
    c = T.dra("ResourceClaim", fixture("extended-resource-claim.json"))
    assert c.key == "default/ext8-extended-resources-fpwvs" and c.extended
    assert c.requests == (DeviceRequest("container-0-request-0", "gpu.nvidia.com", 8),)
    assert c.allocated == tuple(AllocatedDevice("container-0-request-0", "gpu.nvidia.com", "n3", f"gpu-{i}")
                                for i in range(8))
    assert c.node == "n3"
    assert c.owner == c.reserved[0] == "54f69b8d-d68e-49c9-b6ac-1421064b934a"
    assert c.holders == ("54f69b8d-d68e-49c9-b6ac-1421064b934a",)


def test_claim_requests_all_shapes():
    claim = {"metadata": {"name": "c", "namespace": "ml"}, "spec": {"devices": {"requests": [
        {"name": "all", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}},
        {"name": "admin", "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}},
        {"name": "alt", "firstAvailable": [{"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 8},
                                           {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 4}]},
        # The v1beta1 shape: refused by the v1 API (k8s-1.37.2-facts.md A4), never sized here.
        {"name": "old", "deviceClassName": "gpu.nvidia.com", "count": 2},
        {"name": "odd", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": "two"}},
    ]}}}
    c = T.dra("ResourceClaim", claim)
    assert c.key == "ml/c" and not c.extended and c.allocated == () and c.node == ""
    all_, admin, alt, old, odd = c.requests
    assert all_.all and admin.admin and admin.count == 1
    assert [(a.name, a.count) for a in alt.alternatives] == [("big", 8), ("small", 4)]
    assert old.unread == "neither exactly nor firstAvailable (the v1beta1 shape is refused by v1)"
    assert odd.unread == "count 'two' is not a non-negative integer"


def test_template_and_pod_claims():
    template = T.dra("ResourceClaimTemplate", {"metadata": {"name": "gpu8", "namespace": "ml"}, "spec": {"spec": {
        "devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}}]}}}})
    assert template.key == "ml/gpu8" and template.requests == (DeviceRequest("gpus", "gpu.nvidia.com", 8),)
    pod = {"metadata": {"name": "p", "namespace": "ml"},
           "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpu8"},
                                       {"name": "nic", "resourceClaimName": "nic-a"}]}}
    assert pod_claims(pod) == (PodClaim("gpus", "", "gpu8"), PodClaim("nic", "nic-a", ""))
    pod["status"] = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "p-gpus-x7k9m"}]}
    assert T.pod(pod).claims == (PodClaim("gpus", "p-gpus-x7k9m", "gpu8"), PodClaim("nic", "nic-a", ""))
