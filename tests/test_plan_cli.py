"""``railyard plan`` end to end: files in, JSON out, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from extender import topotext
from tests.service.test_dra_service import claim, gpu_slice, node, template
from tests.topologies import TWO_RACKS, gang, pod

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "dra"


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
        "slices": None, "ranks": [address(0, None, "ml/a-0", "h1", "b1/r1/n1"), address(1, None, "ml/a-1", "h2", "b1/r1/n1")],
        "origin": "",  # no workload, no declared size: the members given
    }
    assert b["feasible"] is False and b["level"] is None and b["placement"] == {}
    assert b["reason"] == ("gang ml/b needs 3 pods x 8 GPUs; the cluster fits 2 "
                           "(16 GPUs reserved for other gangs, 14 GPUs in use)")
    assert solo["placement"] == {"ml/solo": "h4"} and solo["level"] == "kubernetes.io/hostname"


def address(rank, slice_, pod, node, nvlink):
    """One member's address in TWO_RACKS (spine b1 > leaf r1/r2 > nvlink n1..n3)."""
    spine, leaf, _ = nvlink.split("/")
    return {"rank": rank, "slice": slice_, "pod": pod, "node": node, "domains": [
        {"level": "network.topology.nvidia.com/spine", "name": "spine", "domain": spine},
        {"level": "network.topology.nvidia.com/leaf", "name": "leaf", "domain": f"{spine}/{leaf}"},
        {"level": "network.topology.nvidia.com/accelerator", "name": "nvlink", "domain": nvlink}], "rails": []}


def test_plan_prints_each_members_address_in_slices(files):
    sliced = gang("s", 4, 4, annotations={"railyard.io/slice-size": "2", "railyard.io/slice-required-topology": "nvlink",
                                          "railyard.io/min-member": "4"})
    for i, p in enumerate(sliced):
        p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = str(3 - i)
    (files / "sliced.json").write_text(json.dumps({"kind": "List", "items": sliced}))
    r = run("--nodes", str(files / "nodes.json"), "--pods", str(files / "pods.yaml"), "--gang", str(files / "sliced.json"))
    (s,) = json.loads(r.stdout)["gangs"]
    assert s["slices"] == {"size": 2, "level": "network.topology.nvidia.com/accelerator", "count": 2}
    # 4 pods x 4 GPUs: n1 is the exact fit; slice 0 (ranks 0, 1) takes h1, slice 1 h2.
    assert s["ranks"] == [address(0, 0, "ml/s-3", "h1", "b1/r1/n1"), address(1, 0, "ml/s-2", "h1", "b1/r1/n1"),
                          address(2, 1, "ml/s-1", "h2", "b1/r1/n1"), address(3, 1, "ml/s-0", "h2", "b1/r1/n1")]


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


def test_two_fabrics_list_each_pools_levels_and_a_gang_lands_in_one(tmp_path):
    drawing = ("scheme topograph-v1\ntier-1 s1\n  tier-0 l1\n    nvl n1: a1 a2\n"
               "scheme gke\nblock b1\n  rack sb1: g1 g2 g3\n")
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"kind": "NodeList", "items": topotext.load(drawing).nodes}))
    pending = tmp_path / "pending.json"
    pending.write_text(json.dumps({"kind": "List", "items": gang("a", 3, 8)}))
    out = json.loads(run("--nodes", str(nodes), "--gang", str(pending)).stdout)
    assert out["topology"]["fabrics"] == {
        "gke": ["cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock"],
        "topograph-v1-2-tiers": ["fabric.topograph.run/tier-1", "fabric.topograph.run/tier-0",
                                 "accelerator.topograph.run/domain"]}
    (a,) = out["gangs"]
    assert a["domain"] == ["gke", "b1", "sb1"] and sorted(a["placement"].values()) == ["g1", "g2", "g3"]


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


def test_plan_reads_resource_slices_claims_and_templates(tmp_path):
    # DRA cluster by hand: NVLink a = a1 a2 free; NVLink b = b1 (its 8 devices held by the extended-
    # resource claim of a pod bound there) b2 free. No node has allocatable nvidia.com/gpu.
    device_class = yaml.safe_load((FIXTURES / "deviceclass-nvidia-gpu.yaml").read_text())
    nodes = tmp_path / "cluster.json"
    nodes.write_text(json.dumps({"kind": "List", "items": [
        *({"kind": "Node", **node(n)} for n in ("a1", "a2", "b1", "b2")), device_class,
        *({"kind": "ResourceSlice", **gpu_slice(n)} for n in ("a1", "a2", "b1", "b2"))]}))
    running = tmp_path / "running.json"
    running.write_text(json.dumps({"kind": "List", "items": [
        pod("ext-b1", 8, node="b1"),
        {"kind": "ResourceClaim", **claim("ext-b1-extended-resources-x", "b1", 8, owner_uid="uid-ml-ext-b1",
                                         reserved=["uid-ml-ext-b1"], extended=True)}]}))
    pending = tmp_path / "pending.yaml"
    tmpl = [{"name": "gpus", "resourceClaimTemplateName": "gpu8"}]
    pending.write_text(yaml.safe_dump_all([
        {"kind": "ResourceClaimTemplate", **template("gpu8", 8)},
        *gang("t", 2, 0, resourceClaims=tmpl), *gang("u", 2, 0, resourceClaims=tmpl),
        *gang("v", 1, 0, resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "missing"}])]))
    r = run("--nodes", str(nodes), "--pods", str(running), "--gang", str(pending), "--levels", "nvidia.com/gpu.clique")
    assert r.returncode == 0, r.stderr
    t, u, v = json.loads(r.stdout)["gangs"]
    assert t["placement"] == {"ml/t-0": "a1", "ml/t-1": "a2"} and t["domain"] == ["uuid-a.1"]
    assert u["reason"] == "gang ml/u needs 2 pods x 8 GPUs; the cluster fits 1 (16 GPUs reserved for other gangs, 8 GPUs in use)"
    assert v["feasible"] is False and v["reason"] == (
        "pod ml/v-0: ResourceClaimTemplate ml/missing (entry gpus) is not known to railyard; railyard cannot count "
        "the pod's GPUs and leaves it to kube-scheduler (no gang hold)")


def test_plan_aligns_rails_from_device_attributes(tmp_path):
    # One NVLink domain, every node with 4 of its 8 devices held. a1 holds gpu-2,3,6,7 (rails 0, 1,
    # 4, 5 free); a2-a5 hold gpu-4..7 (rails 0-3 free). Counts alone would take a1 first.
    device_class = yaml.safe_load((FIXTURES / "deviceclass-nvidia-gpu.yaml").read_text())
    names = ["a1", "a2", "a3", "a4", "a5"]
    held = {"a1": [2, 3, 6, 7], **{n: [4, 5, 6, 7] for n in names[1:]}}
    claims = []
    for n, gpus in held.items():
        c = claim(f"held-{n}", n, 4)
        c["status"]["allocation"]["devices"]["results"] = [
            {"request": "gpus", "driver": "gpu.nvidia.com", "pool": n, "device": f"gpu-{i}"} for i in gpus]
        claims.append({"kind": "ResourceClaim", **c})
    nodes = tmp_path / "cluster.json"
    nodes.write_text(json.dumps({"kind": "List", "items": [
        *({"kind": "Node", **node(n)} for n in names), device_class,
        *({"kind": "ResourceSlice", **gpu_slice(n)} for n in names), *claims]}))
    pending = tmp_path / "pending.yaml"
    pending.write_text(yaml.safe_dump_all(gang("g", 4, 4, annotations={"railyard.io/min-member": "4"})))
    args = ("--nodes", str(nodes), "--gang", str(pending), "--levels", "nvidia.com/gpu.clique")
    r = run(*args, "--rail-attribute", "rail")
    assert r.returncode == 0, r.stderr
    (g,) = json.loads(r.stdout)["gangs"]
    assert sorted(g["placement"].values()) == ["a2", "a3", "a4", "a5"]
    assert [m["rails"] for m in g["ranks"]] == [["0", "1", "2", "3"]] * 4
    r = run(*args)  # without the attribute: counts only, a1 first, no rails
    (g,) = json.loads(r.stdout)["gangs"]
    assert "a1" in g["placement"].values() and all(m["rails"] == [] for m in g["ranks"])


def run_at_a_terminal(*args: str) -> str:
    """``railyard plan ARGS`` with its stdout on a pseudo-terminal, as a person runs it."""
    import os
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "extender", "plan", *args], stdout=follower,
                            stderr=subprocess.PIPE, text=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(60) == 0, proc.stderr.read()
    return b"".join(chunks).decode().replace("\r\n", "\n")


TABLE = """\
GANG     FITS  WITHIN            PODS  NODES
ml/a     yes   nvlink b1/r1/n1   2     h1 h2
ml/b     no    -                 -     -
ml/solo  yes   node b1/r1/n2/h4  1     h4

why not:
  gang ml/b needs 3 pods x 8 GPUs; the cluster fits 2 (16 GPUs reserved for other gangs, 14 GPUs in use)

levels: spine > leaf > nvlink
"""


def test_plan_prints_a_table_at_a_terminal_and_json_to_a_pipe_or_when_asked(files):
    args = ("--nodes", str(files / "nodes.json"), "--pods", str(files / "pods.yaml"), "--gang", str(files / "pending.json"))
    table = run_at_a_terminal(*args)
    assert table == TABLE
    assert json.loads(run(*args).stdout)["gangs"][0]["gang"] == "ml/a"  # a pipe: today's JSON
    assert json.loads(run_at_a_terminal(*args, "-o", "json"))["gangs"][1]["feasible"] is False
    assert run(*args, "-o", "table").stdout == table
    bad = run(*args, "-o", "yaml")
    assert bad.returncode == 2 and "argument -o/--output: invalid choice: 'yaml'" in bad.stderr


def test_the_readme_shows_the_table_plan_prints_for_the_examples():
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    command = "$ railyard plan --nodes examples/nodes.yaml --pods examples/running.yaml --gang examples/pending.yaml\n"
    shown = readme.split(command, 1)[1].split("```", 1)[0]
    r = subprocess.run([sys.executable, "-m", "extender", "plan", *command.split()[3:], "-o", "table"],
                       capture_output=True, text=True, cwd=root)
    assert r.returncode == 0, r.stderr
    assert r.stdout == shown


def test_a_jobsets_pods_are_planned_as_the_gang_the_jobset_sizes(files):
    from tests.adapters.kubeobjects.test_workloads import jobset, jobset_pods, rjob
    # Two of the JobSet's 3 pods given: the gang is planned for 3 (the JobSet's size), not for 2.
    pending = files / "jobset.json"
    items = [jobset("t", [rjob("w", 1, 3)]), *jobset_pods("t", [("w", 1, 3)])[:2]]
    pending.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    r = run("--nodes", str(files / "nodes.json"), "--pods", str(files / "pods.yaml"), "--gang", str(pending))
    assert r.returncode == 0, r.stderr
    (answer,) = json.loads(r.stdout)["gangs"]
    assert answer["gang"] == "ml/t@0" and answer["reason"].startswith("gang ml/t@0: 3 pods, 24 GPUs"), answer
