"""``railyard plan`` end to end: files in, JSON out, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from extender import topotext
from tests.topologies import TWO_RACKS, gang, pod


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "extender", "plan", *args], capture_output=True, text=True)


@pytest.fixture
def files(tmp_path):
    spec = topotext.load(TWO_RACKS)
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": spec.nodes}))
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "PodList", "items": spec.filler_pods()}))
    pending = tmp_path / "pending.json"
    pending.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                   "items": gang("a", 2, 8) + gang("b", 3, 8) + [pod("solo", 2)]}))
    return tmp_path


def test_plan_prints_one_answer_per_gang(files):
    r = run("--nodes", str(files / "nodes.json"), "--pods", str(files / "pods.yaml"),
            "--gang", str(files / "pending.json"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    a, b, solo = out["gangs"]
    assert a == {
        "gang": "ml/a", "feasible": True, "level": "network.topology.nvidia.com/accelerator",
        "domain": ["b1", "r1", "n1"], "placement": {"ml/a-0": "h1", "ml/a-1": "h2"},
        "reason": "gang ml/a: 2 pods, 16 GPUs on 2 nodes within network.topology.nvidia.com/accelerator b1/r1/n1",
    }
    assert b["feasible"] is False and b["level"] is None and b["placement"] == {}
    assert b["reason"] == ("gang ml/b needs 3 pods x 8 GPUs; the cluster fits 2 "
                           "(16 GPUs reserved for other gangs, 14 GPUs in use)")
    assert solo["placement"] == {"ml/solo": "h4"} and solo["level"] == "kubernetes.io/hostname"


def test_without_pods_every_gpu_is_free(files):
    r = run("--nodes", str(files / "nodes.json"), "--gang", str(files / "pending.json"))
    assert r.returncode == 0
    assert json.loads(r.stdout)["gangs"][1]["feasible"] is True


def test_explicit_levels_and_resource(files):
    r = run("--nodes", str(files / "nodes.json"), "--gang", str(files / "pending.json"),
            "--levels", "network.topology.nvidia.com/spine", "--gpu-resource", "example.com/gpu")
    out = json.loads(r.stdout)
    assert out["topology"]["levels"] == ["network.topology.nvidia.com/spine"]
    # The pods ask for no example.com/gpu: a gang that needs no GPUs is placed anywhere.
    assert out["gangs"][0]["reason"].startswith("gang ml/a: 2 pods, 0 GPUs on 1 node")


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "not valid JSON or YAML"),
        ('{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "x"}}]}', "item 0 has kind 'Pod', expected Node"),
        ('{"kind": "NodeList", "items": [{"metadata": {}}]}', "item 0 (Node) has no metadata.name"),
        ('{"kind": "NodeList", "items": 3}', "'items' is not a list"),
        ('{"kind": "NodeList", "items": []}', "no Node objects"),
    ],
)
def test_bad_input_exits_2_with_one_line(files, content, message):
    bad = files / "bad.json"
    bad.write_text(content)
    r = run("--nodes", str(bad), "--gang", str(files / "pending.json"))
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and str(bad) in r.stderr and message in r.stderr


def test_missing_file(files):
    r = run("--nodes", str(files / "nope.json"), "--gang", str(files / "pending.json"))
    assert r.returncode == 2 and "nope.json: cannot read" in r.stderr
