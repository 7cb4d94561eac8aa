"""The live topology view's document: the service's snapshot as JSON (adapters/topoview.py),
on a cluster driven through the real service to a bound gang, a reserved one and one that
cannot be placed."""

from __future__ import annotations

from extender.adapters.topoview import topology_json
from tests.service.test_live import bind_async, create, extender, steer, wait_until
from tests.topologies import gang, pod

DRAWING = """
block b1
  rack r1
    nvl n1: h1[8/8] h2[8/8]
    nvl n2: h3[8/8] h4[2/8]
  rack r2
    nvl n3: h5[8/8] h6[8/8 cordoned]
"""
NVLINK = {"railyard.io/required-topology": "nvlink"}


def nodes_of(tree):
    """Every node of the document with the path of domains above it."""
    if "nodes" in tree:
        return [((tree["name"],), n) for n in tree["nodes"]]
    return [((tree["name"], *path), n) for child in tree["children"] for path, n in nodes_of(child)]


def bound(ext, pods):
    """Plan, bind and run the gang as kube-scheduler and the watch would; its plan."""
    plan = steer(ext, pods)
    errors = {}
    for t in [bind_async(ext, p, plan[f"ml/{p['metadata']['name']}"], errors) for p in pods]:
        t.join(5)
    assert errors == {}
    for p in pods:  # the watch shows them running
        p["spec"]["nodeName"] = plan[f"ml/{p['metadata']['name']}"]
        p["status"]["phase"] = "Running"
        ext.pod_upserted(p)
    return plan


def test_a_bound_a_reserved_and_a_waiting_gang_as_the_view_shows_them():
    ext, _, _ = extender(DRAWING)
    plan = bound(ext, gang("a", 2, 8, annotations=NVLINK))
    assert sorted(plan.values()) == ["h1", "h2"]  # the only NVLink domain with 16 free
    b_node = steer(ext, gang("b", 1, 8))["ml/b-0"]
    assert b_node in ("h3", "h5")
    c = gang("c", 2, 8, annotations=NVLINK)
    create(ext, c)
    assert ext.filter(c[0], ["h1", "h2", "h3", "h4", "h5", "h6"]).node_names == ()

    doc = topology_json(ext.topology_view())

    assert doc["levels"] == ["spine", "leaf", "nvlink"]
    assert doc["totals"] == {"nodes": 6, "gpus": 48, "used": 16 + 6, "reserved": 8, "free": 8 + 2, "blocked": 1}
    got = {n["name"]: (path, n) for path, n in nodes_of(doc["tree"])}
    assert list(got) == ["h1", "h2", "h3", "h4", "h5", "h6"]  # depth-first order
    assert {name: path for name, (path, _) in got.items()} == {
        "h1": ("cluster", "b1", "r1", "n1"), "h2": ("cluster", "b1", "r1", "n1"),
        "h3": ("cluster", "b1", "r1", "n2"), "h4": ("cluster", "b1", "r1", "n2"),
        "h5": ("cluster", "b1", "r2", "n3"), "h6": ("cluster", "b1", "r2", "n3")}
    expected = {
        "h1": {"name": "h1", "gpus": 8, "used": 8, "reserved": 0, "bound": {"ml/a": 8}},
        "h2": {"name": "h2", "gpus": 8, "used": 8, "reserved": 0, "bound": {"ml/a": 8}},
        "h3": {"name": "h3", "gpus": 8, "used": 0, "reserved": 0},
        "h4": {"name": "h4", "gpus": 8, "used": 6, "reserved": 0},
        "h5": {"name": "h5", "gpus": 8, "used": 0, "reserved": 0},
        "h6": {"name": "h6", "gpus": 8, "used": 0, "reserved": 0, "blocked": "cordoned"},
    }
    expected[b_node].update(reserved=8, held={"ml/b": 8})
    assert {name: n for name, (_, n) in got.items()} == expected

    gangs = {g["gang"]: g for g in doc["gangs"]}
    assert set(gangs) == {"ml/a", "ml/b", "ml/c"}
    a = gangs["ml/a"]
    assert (a["phase"], a["level"], a["domain"], a["nodes"], a["pods"], a["gpus"],
            a["closest"], a["deadline_in_seconds"]) == ("bound", "nvlink", "b1/r1/n1", ["h1", "h2"], 2, 16,
                                                                None, None)
    held = gangs["ml/b"]
    assert (held["phase"], held["level"], held["nodes"], held["at_bind"], held["min_member"]) == (
        "planned", "node", [b_node], 0, 1)
    assert held["domain"] == ("b1/r1/n2/h3" if b_node == "h3" else "b1/r2/n3/h5")
    assert held["deadline_in_seconds"] > 0
    waiting = gangs["ml/c"]
    # The NVLink domain that holds one of its two pods is the one b did not take (h6 is cordoned).
    closest = "b1/r2/n3" if b_node == "h3" else "b1/r1/n2"
    assert (waiting["phase"], waiting["domain"], waiting["nodes"], waiting["closest"]) == (
        "pending", None, [], {"level": "nvlink", "domain": closest})
    assert waiting["reason"].startswith(f"gang ml/c needs 2 pods x 8 GPUs within one "
                                        f"network.topology.nvidia.com/accelerator; best nvlink {closest} fits 1")


def test_a_bound_gang_shows_no_more_gpus_than_its_node_uses():
    """A member that finished leaves its node free: the bound plan does not paint it used."""
    ext, _, _ = extender(DRAWING)
    a = gang("a", 2, 8, annotations=NVLINK)
    plan = bound(ext, a)
    a[1]["status"]["phase"] = "Succeeded"
    ext.pod_upserted(a[1])
    nodes = {n["name"]: n for _, n in nodes_of(topology_json(ext.topology_view())["tree"])}
    running, finished = (plan[f"ml/{p['metadata']['name']}"] for p in a)
    assert nodes[running]["bound"] == {"ml/a": 8} and nodes[running]["used"] == 8
    assert "bound" not in nodes[finished] and nodes[finished]["used"] == 0


def test_a_cluster_without_levels_is_one_domain_of_nodes():
    ext, _, _ = extender()
    ext.relisted("nodes", [{"metadata": {"name": name, "labels": {}},
                            "status": {"allocatable": {"nvidia.com/gpu": "8"}}} for name in ("h1", "h2")])
    ext.relisted("pods", [pod("x", 4, node="h2")])
    doc = topology_json(ext.topology_view())
    assert doc["levels"] == []
    assert doc["tree"] == {"name": "cluster", "nodes": [
        {"name": "h1", "gpus": 8, "used": 0, "reserved": 0}, {"name": "h2", "gpus": 8, "used": 4, "reserved": 0}]}


def test_gpus_held_for_a_starving_gang_are_named_for_it_and_count_only_once_free():
    from extender.core.gangs.starvation import DRAIN
    from tests.service.test_starvation import big, cluster, planned

    ext, clock, _ = cluster(starvation=60)
    assert planned(ext, big()) == []
    clock.now += 61
    assert planned(ext, big()) == []
    drained = sorted(s.node for s in ext.ctx.state.reservations()[f"ml/big{DRAIN}"].slots)
    busy, free = drained if drained[0] in ("a1", "b1") else drained[::-1]  # a1 and b1 run an 8-GPU pod
    doc = topology_json(ext.topology_view())
    nodes = {n["name"]: n for _, n in nodes_of(doc["tree"])}
    assert nodes[busy] == {"name": busy, "gpus": 8, "used": 8, "reserved": 0, "held": {"ml/big": 8},
                           "draining": ["ml/big"]}
    assert nodes[free] == {"name": free, "gpus": 8, "used": 0, "reserved": 8, "held": {"ml/big": 8},
                           "draining": ["ml/big"]}
    assert doc["totals"] == {"nodes": 4, "gpus": 32, "used": 16, "reserved": 8, "free": 8, "blocked": 0}


def test_a_gang_that_timed_out_holds_nothing_and_is_listed_without_a_plan():
    ext, _, clock = extender(DRAWING)
    pods = gang("t", 2, 8, annotations={"railyard.io/timeout-seconds": "30"})
    create(ext, pods)
    plan = steer(ext, pods[:1])
    errors = {}
    t = bind_async(ext, pods[0], plan["ml/t-0"], errors)
    wait_until(lambda: ext.debug_gangs()[0].phase.startswith("waiting"))
    held = topology_json(ext.topology_view())
    assert held["gangs"][0]["phase"] == "waiting" and len(held["gangs"][0]["nodes"]) == 2
    clock.now += 31
    t.join(5)
    doc = topology_json(ext.topology_view())
    (g,) = doc["gangs"]
    assert (g["phase"], g["domain"], g["nodes"], g["pods"], g["closest"]) == ("timed out", None, [], 0, None)
    assert g["reason"].startswith("gang ml/t timed out at bind: 1/2 GPU members arrived within 30s")
    assert not any("held" in n for _, n in nodes_of(doc["tree"])) and doc["totals"]["reserved"] == 0
