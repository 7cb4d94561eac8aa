"""Rail-aligned gangs (issue 16, item 5) on the live extender: GPUs as DRA devices whose ``rail``
attribute says which rail each is on (GPU i on rail i, as ``cluster up --gpus-as-dra`` publishes
them), claims that hold some devices, and a gang of 4 pods x 4 GPUs.

Every node has 4 of 8 GPUs in use, so counts alone cannot tell the nodes apart. The expected
nodes and rails are written out by hand from the claims below: a node's free rails are the
devices no claim holds.
"""

from __future__ import annotations

import yaml

from extender.settings import DraSettings, Settings
from tests.service.test_dra_service import FIXTURES, NV, claim, node
from extender.adapters.kubeobjects.pods import binding_annotations
from tests.service.test_live import Clock, Extender, MemoryBinder, bind_async, create
from tests.topologies import TRANSLATE, gang

NVLINK = {"railyard.io/required-topology": "nvlink"}


def devices_slice(name: str) -> dict:
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "rail": {"int": i}}} for i in range(8)]
    return {"metadata": {"name": f"{name}-{NV}"}, "spec": {"driver": NV, "nodeName": name,
                                                          "pool": {"name": name, "generation": 1}, "devices": devices}}


def holding(name: str, node_name: str, gpus: list[int]) -> dict:
    """A claim allocated the devices ``gpus`` of the node (nobody bound holds it: still usage)."""
    c = claim(name, node_name, len(gpus))
    c["status"]["allocation"]["devices"]["results"] = [
        {"request": "gpus", "driver": NV, "pool": node_name, "device": f"gpu-{i}"} for i in gpus]
    return c


def rail_cluster(used: dict[str, list[int]], rail_attribute: str = "rail") -> Extender:
    """Nodes in one NVLink domain (``uuid-a.1``), each with the devices ``used`` names held."""
    settings = Settings(dra=DraSettings(rail_attribute=rail_attribute))
    ext = Extender(settings, MemoryBinder(), clock=Clock(),
                   kinds=("nodes", "pods", "podgroups", "deviceclasses", "resourceslices",
                          "resourceclaims", "resourceclaimtemplates"))
    ext.relisted("nodes", [node(n) for n in used])
    ext.relisted("pods", [])
    ext.relisted("podgroups", [])
    cls = yaml.safe_load((FIXTURES / "deviceclass-nvidia-gpu.yaml").read_text())
    ext.relisted("deviceclasses", [TRANSLATE.dra("DeviceClass", cls)])
    ext.relisted("resourceslices", [TRANSLATE.dra("ResourceSlice", devices_slice(n)) for n in used])
    ext.relisted("resourceclaims", [TRANSLATE.dra("ResourceClaim", holding(f"held-{n}", n, gpus))
                                    for n, gpus in used.items() if gpus])
    ext.relisted("resourceclaimtemplates", [])
    return ext


def place(ext: Extender, name: str, count: int = 4, gpus: int = 4) -> dict[str, tuple[str, list[str]]]:
    """Member -> (node, rails) as /debug/gangs shows the plan."""
    members = gang(name, count, gpus, annotations={**NVLINK, "railyard.io/min-member": str(count)})
    for p in members:
        ext.pod_upserted(p)
    for p in members:
        ext.filter(p, list(ext.ctx.state.topology.names))
    (rec,) = [g for g in ext.debug_gangs() if g.gang == f"ml/{name}"]
    return {r.pod.split("/")[1]: (r.node, list(r.rails)) for r in rec.ranks}


LOW, HIGH, MIXED = [4, 5, 6, 7], [0, 1, 2, 3], [2, 3, 6, 7]
"""Devices held: rails 0-3 free, rails 4-7 free, rails 0, 1, 4, 5 free."""


def test_four_by_four_lands_where_rails_0_to_3_are_free_not_on_the_mixed_node():
    # a1 is first in node order and has 4 free GPUs like the rest: counts alone would take it.
    ext = rail_cluster({"a1": MIXED, "a2": LOW, "a3": LOW, "a4": LOW, "a5": LOW})
    got = place(ext, "g")
    assert sorted(n for n, _ in got.values()) == ["a2", "a3", "a4", "a5"]
    assert all(rails == ["0", "1", "2", "3"] for _, rails in got.values())


def test_with_three_aligned_nodes_the_mixed_one_is_taken_last_with_its_own_rails():
    ext = rail_cluster({"a1": MIXED, "a2": LOW, "a3": LOW, "a4": LOW, "a5": MIXED})
    got = place(ext, "g")
    nodes = {n: rails for n, rails in got.values()}
    assert set(nodes) >= {"a2", "a3", "a4"} and len(nodes) == 4
    (mixed,) = set(nodes) - {"a2", "a3", "a4"}
    assert mixed in ("a1", "a5") and nodes[mixed] == ["0", "1", "4", "5"]
    assert all(nodes[n] == ["0", "1", "2", "3"] for n in ("a2", "a3", "a4"))


def test_the_rail_set_most_nodes_share_wins():
    # Three nodes have rails 4-7 free, two have 0-3: the gang of 3 takes the three.
    ext = rail_cluster({"a1": LOW, "a2": HIGH, "a3": LOW, "a4": HIGH, "a5": HIGH})
    got = place(ext, "g", count=3)
    assert sorted(n for n, _ in got.values()) == ["a2", "a4", "a5"]
    assert all(rails == ["4", "5", "6", "7"] for _, rails in got.values())


def test_a_planned_gang_takes_its_rails_so_the_next_gang_gets_the_others():
    ext = rail_cluster({f"a{i}": [6, 7] for i in range(1, 5)})  # rails 0-5 free on each
    first = place(ext, "g1")  # one 4-GPU member per node (6 free)
    assert sorted(n for n, _ in first.values()) == ["a1", "a2", "a3", "a4"]
    assert all(rails == ["0", "1", "2", "3"] for _, rails in first.values())
    # Left per node: 2 GPUs, on rails 4 and 5 (had g1 not reserved its rails, 0-1 would look free).
    second = place(ext, "g2", count=2, gpus=2)
    assert len({n for n, _ in second.values()}) == 2
    assert all(rails == ["4", "5"] for _, rails in second.values())


def test_two_members_on_one_node_take_both_halves():
    ext = rail_cluster({"a1": [], "a2": []})  # two free 8-GPU nodes: 2 members on each
    got = place(ext, "g")
    assert sorted(n for n, _ in got.values()) == ["a1", "a1", "a2", "a2"]
    for n in ("a1", "a2"):
        assert sorted(r for node, r in got.values() if node == n) == [["0", "1", "2", "3"], ["4", "5", "6", "7"]]


def test_whole_node_members_and_clusters_without_rails_get_no_rails():
    ext = rail_cluster({"a1": [], "a2": []})
    assert all(rails == [] for _, rails in place(ext, "whole", count=2, gpus=8).values())
    plain = rail_cluster({"a1": MIXED, "a2": LOW, "a3": LOW, "a4": LOW, "a5": LOW}, rail_attribute="")
    got = place(plain, "g")
    assert all(rails == [] for _, rails in got.values())
    assert "a1" in {n for n, _ in got.values()}  # counts only: the first node in order


def test_rails_follow_claims_that_change_after_the_topology_was_built():
    held = {"a1": MIXED, "a2": LOW, "a3": LOW, "a4": LOW, "a5": LOW}
    ext = rail_cluster({n: [] for n in held})
    ext.ctx.state.view()  # the topology is built while every rail is free
    ext.relisted("resourceclaims", [TRANSLATE.dra("ResourceClaim", holding(f"held-{n}", n, gpus))
                                    for n, gpus in held.items()])
    got = place(ext, "g")
    assert sorted(n for n, _ in got.values()) == ["a2", "a3", "a4", "a5"]


def test_rails_sort_naturally_and_odd_names_do_not_crash():
    from extender.core.placement.rails import rail_order

    assert sorted(["10", "2", "nic-b", "²", "0"], key=rail_order) == ["0", "2", "10", "nic-b", "²"]


def test_a_replacement_is_given_the_rail_set_of_the_running_members():
    """Issue 20 item 4: a replacement's address includes rails. a1 (first in node order) has rails
    0, 1, 4, 5 free, a2-a5 rails 0-3, 4 GPUs each: the gang of 4 x 4 takes a2-a5, each member on
    rails 0-3. The member on a3 is lost; its replacement, planned alone beside the running
    three, has a1 and a3 to choose from, 4 free GPUs each: counts alone take a1. It goes to a3,
    where the gang's rails are free, told rails 0-3 (the set railyard told the running members)
    and the lost member's rank."""
    ext = rail_cluster({"a1": MIXED, **{n: LOW for n in NODES_A[1:]}})
    binder = ext.ctx.ports.bindings
    members = gang("r", 4, 4, annotations={**NVLINK, "railyard.io/min-member": "4"})
    create(ext, members)
    plan = {p["metadata"]["name"]: ext.filter(p, NODES_A).node_names[0] for p in members}
    errors: dict = {}
    for t in [bind_async(ext, p, plan[p["metadata"]["name"]], errors) for p in members]:
        t.join(5)
    assert errors == {} and sorted(plan.values()) == ["a2", "a3", "a4", "a5"]
    for p in members:  # the watch shows them running, with what railyard wrote on them
        p["spec"]["nodeName"] = plan[p["metadata"]["name"]]
        p["status"] = {"phase": "Running"}
        p["metadata"]["annotations"].update(binding_annotations(binder.marks[f"ml/{p['metadata']['name']}"]))
        ext.pod_upserted(p)
    (i,) = [i for i, p in enumerate(members) if plan[p["metadata"]["name"]] == "a3"]
    lost = binder.marks[f"ml/r-{i}"].address
    assert lost.rails == ("0", "1", "2", "3")
    ext.pod_deleted(members[i])
    (again,) = gang("r", 1, 4, annotations={**NVLINK, "railyard.io/min-member": "4"}, start=i)
    again["metadata"]["name"], again["metadata"]["uid"] = "r-again", "uid-r-again"
    create(ext, [again])
    (node,) = ext.filter(again, NODES_A).node_names
    assert node == "a3"
    bind_async(ext, again, node, errors).join(5)
    assert errors == {}
    told = binder.marks["ml/r-again"].address
    assert (told.rank, told.rails) == (lost.rank, ("0", "1", "2", "3"))


NODES_A = ["a1", "a2", "a3", "a4", "a5"]
