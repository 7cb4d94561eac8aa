"""examples/sliced-job.yaml does what it says: its pods are planned in slices, and every
environment variable it reads through the downward API is an annotation railyard writes."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from extender import topotext
from extender.adapters.kubeobjects import notes
from extender.core.placement.address import addresses
from extender.core.model import Address
from extender.core.placement.planner import Placement
from extender.core.placement.slices import SliceRule
from extender.service.answers import Slices
from tests.topologies import cluster

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FIELD = re.compile(r"^metadata\.annotations\['([^']+)'\]$")


def job_pods(job: dict) -> list[dict]:
    """The pods an Indexed Job's controller creates: the template, named and indexed."""
    template, name = job["spec"]["template"], job["metadata"]["name"]
    pods = []
    for i in range(job["spec"]["completions"]):
        meta = template["metadata"]
        pods.append({"apiVersion": "v1", "kind": "Pod", "spec": template["spec"], "metadata": {
            "name": f"{name}-{i}-x", "namespace": job["metadata"]["namespace"], "uid": f"uid-{i}",
            "labels": {**meta["labels"], "batch.kubernetes.io/job-completion-index": str(i)},
            "annotations": {**meta["annotations"], "batch.kubernetes.io/job-completion-index": str(i)}}})
    return pods


def test_the_sliced_job_example_is_planned_in_slices_and_its_env_reads_what_railyard_writes():
    (job,) = yaml.safe_load_all((EXAMPLES / "sliced-job.yaml").read_text())
    # Two leaves of two NVLink domains of 5 nodes; in leaf r1, n1 has 3 nodes free: 8 pods fit r1,
    # but not 2 slices of 4, so the job goes to r2, a slice per NVLink domain.
    drawing = topotext.generate(blocks=1, racks=2, nvl=2, nodes=5).replace(
        "b1-r1-n1-h1 b1-r1-n1-h2 ", "b1-r1-n1-h1[0/8] b1-r1-n1-h2[0/8] ")
    w = cluster(drawing)
    pods = job_pods(job)
    (plan,) = w.plan_pending(pods)
    assert plan.feasible, plan.reason
    assert plan.slices == Slices(size=4, level="network.topology.nvidia.com/accelerator", count=2)
    ranks = plan.ranks
    assert [r.pod for r in ranks] == [f"ml/llama-tp4-{i}-x" for i in range(8)]  # by completion index
    nvlink = [r.domains[-1].domain for r in ranks]
    assert nvlink == ["b1/r2/n1"] * 4 + ["b1/r2/n2"] * 4

    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    keys = {e["name"]: FIELD.match(e["valueFrom"]["fieldRef"]["fieldPath"]).group(1) for e in env}
    assert keys == {"RAILYARD_RANK": notes.RANK, "RAILYARD_SLICE": notes.SLICE,
                    "RAILYARD_NVLINK": notes.DOMAIN + "nvlink", "RAILYARD_LEAF": notes.DOMAIN + "leaf"}
    # What the launcher of rank 5 reads: its own address, as its mark writes it.
    written = notes.address_annotations(address_of(w, "ml/llama-tp4-5-x"))
    assert {name: written[key] for name, key in keys.items()} == {
        "RAILYARD_RANK": "5", "RAILYARD_SLICE": "1", "RAILYARD_NVLINK": "b1/r2/n2", "RAILYARD_LEAF": "b1/r2"}


def address_of(w, member: str) -> Address:
    """The member's address from the reservation the what-if plan left."""
    held = w.state.reservation("ml/llama-tp4")
    rule = SliceRule(4, w.state.topology.level_index("nvlink"))
    placement = Placement("ml/llama-tp4", held.slots, 0, w.state.topology.domain(-1, 0), slices=rule)
    return next(a for a in addresses(w.state.topology, placement) if a.pod == member)
