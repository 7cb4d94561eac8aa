"""railyard's tree as Slurm's topology files (``extender/adapters/slurm.py``, ``railyard topology``)
and the Slurm examples (docs/slurm.md).

The expected files are written by hand from Slurm's own documentation, Slurm 26.05
(SchedMD/slurm tag slurm-26-05-3-1): topology.conf(5) "SwitchName=s0 Nodes=dev[0-5]",
"SwitchName=s3 Switches=s[0-2]", "BlockName=block1 Nodes=node[1-32]", "BlockSizes=30,120";
topology.yaml(5) (its EXAMPLE section); node lists are hostlist expressions as slurm.conf(5)
NodeName describes them ("tux[0-3,12,18-20]", leading zeros fix the width: "linux[0000-1023]").
The round trip parses the output with a reader written here from the same pages, never with the
writer's own code, and checks the tree against the drawing's labels.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from extender import topotext
from extender.adapters import kubeobjects as ko
from extender.adapters import slurm
from extender.adapters.kubeobjects import notes
from extender.core.gangs import gangspec
from extender.core.model import Address, Place
from extender.core.cluster.topology import Topology
from tests.test_examples import job_pods
from tests.topologies import TRANSLATE

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "slurm"
SPINE, LEAF, NVL = (f"network.topology.nvidia.com/{k}" for k in ("spine", "leaf", "accelerator"))

# Two spines (so a root joins them); leaf l1 under both (so its switches are named by path);
# NVLink domains of 3 and 4 nodes; node names zero-padded and not.
DRAWN = """
block s1
  rack l1
    nvl n1: gpu01 gpu02 gpu03 gpu04
    nvl n2: gpu05 gpu06 gpu07 gpu08
  rack l2
    nvl n3: gpu09 gpu10 gpu11 gpu12
    nvl n4: gpu13 gpu14 gpu15
block s2
  rack l1
    nvl n5: node-7 node-8 node-9 node-10
"""

# By hand from topology.conf(5): leaf switches list nodes, the others their child switches; no
# job spans switches without a common parent, so "root" joins s1 and s2. Leaf l1 exists under
# both spines: switch names must be unique, so both are named by their path.
DRAWN_TREE = """\
SwitchName=root Switches=s[1-2]
SwitchName=s1 Switches=s1-l1,l2
SwitchName=s2 Switches=s2-l1
SwitchName=s1-l1 Nodes=gpu[01-08]
SwitchName=l2 Nodes=gpu[09-15]
SwitchName=s2-l1 Nodes=node-[7-10]
"""
# Blocks: the NVLink domains. The base block size is the smallest block (n4, 3 nodes: "Each block
# must have at least the planning base block size count of nodes"); 6 = two neighbouring blocks,
# which always share a leaf here ([n1 n2] l1, [n3 n4] l2, [n5] l1); four do not ([n1..n4]).
DRAWN_BLOCKS = """\
BlockName=n1 Nodes=gpu[01-04]
BlockName=n2 Nodes=gpu[05-08]
BlockName=n3 Nodes=gpu[09-12]
BlockName=n4 Nodes=gpu[13-15]
BlockName=n5 Nodes=node-[7-10]
BlockSizes=3,6
"""

# Node h7 lacks the leaf label, h5 and h6 the NVLink label (tests/topologies.py MISSING_LABELS).
MISSING = """
block b1
  rack r1
    nvl n1: h1 h2
    nodes: h5 h6
  nodes: h7
"""
MISSING_TREE = """\
SwitchName=b1 Switches=r1,no-leaf-h7
SwitchName=r1 Nodes=h[1-2,5-6]
SwitchName=no-leaf-h7 Nodes=h7
"""
MISSING_BLOCKS = """\
BlockName=n1 Nodes=h[1-2]
BlockName=no-nvlink-h5 Nodes=h5
BlockName=no-nvlink-h6 Nodes=h6
BlockName=no-nvlink-h7 Nodes=h7
BlockSizes=1
"""


def tree_of(drawing: str, levels: list[str] | None = None) -> tuple[Topology, list[dict]]:
    spec = topotext.load(drawing)
    facts = [TRANSLATE.node(n) for n in spec.nodes]
    choice = ko.explicit_levels(levels) if levels else ko.detect_levels(facts)
    return Topology(choice.levels, facts), spec.nodes


def body(text: str) -> str:
    """The file without its comment lines (Slurm: '#' starts a comment)."""
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith("#"))


# -- a reader written from Slurm's documentation ------------------------------------------------


def expand(expr: str) -> list[str]:
    """A hostlist expression (slurm.conf(5) NodeName; topology.conf(5)): names separated by commas
    outside brackets; each bracket a comma list of numbers or lo-hi ranges; a number written with
    leading zeros keeps its width."""
    out: list[str] = []
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", expr):
        out.extend(_expand_item(item))
    return out


def _expand_item(item: str) -> list[str]:
    m = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", item)
    if not m:
        return [item]
    prefix, ranges, rest = m.groups()
    heads = []
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        heads.extend(f"{prefix}{n:0{width}d}" for n in range(int(lo), int(hi or lo) + 1))
    return [h + tail for h in heads for tail in _expand_item(rest)]


def test_the_reader_reads_the_documented_examples():
    assert expand("tux[0-3,12,18-20]") == ["tux0", "tux1", "tux2", "tux3", "tux12", "tux18", "tux19", "tux20"]
    assert expand("s[0-2,4-8,12]") == ["s0", "s1", "s2", "s4", "s5", "s6", "s7", "s8", "s12"]
    assert expand("linux[0000-1023]")[:2] == ["linux0000", "linux0001"] and len(expand("linux[0000-1023]")) == 1024
    assert expand("lx[15,18,32-33]") == ["lx15", "lx18", "lx32", "lx33"]
    assert len(expand("rack[0-63]_blade[0-41]")) == 64 * 42 and expand("rack[0-63]_blade[0-41]")[1] == "rack0_blade1"
    assert expand("alpha,beta,gamma") == ["alpha", "beta", "gamma"]


def parse_conf(text: str) -> dict:
    """topology.conf: one record per line, ``Key=Value`` words, keys case-insensitive, '#' comments."""
    switches, blocks, sizes = {}, {}, None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = dict(w.split("=", 1) for w in line.split())
        words = {k.lower(): v for k, v in words.items()}
        if "switchname" in words:
            assert ("switches" in words) != ("nodes" in words), f"a switch has child switches or nodes: {line}"
            name = words["switchname"]
            assert name not in switches, f"switch {name} defined twice"
            switches[name] = (expand(words.get("switches", "")), expand(words.get("nodes", "")))
        elif "blockname" in words:
            assert words["blockname"] not in blocks
            blocks[words["blockname"]] = expand(words["nodes"])
        elif "blocksizes" in words:
            sizes = [int(x) for x in words["blocksizes"].split(",")]
        else:
            raise AssertionError(f"not a topology.conf line: {line}")
    return {"switches": switches, "blocks": blocks, "sizes": sizes}


def parse_yaml(text: str) -> dict[str, dict]:
    """topology.yaml(5): a list of topologies; ``topology`` first, exactly one of tree/block/flat."""
    doc = yaml.safe_load(text)
    out = {}
    for topo in doc:
        assert next(iter(topo)) == "topology"
        assert sum(k in topo for k in ("tree", "block", "flat", "ring", "torus3d")) == 1
        if "tree" in topo:
            out[topo["topology"]] = {"switches": {s["switch"]: (expand(s.get("children", "")), expand(s.get("nodes", "")))
                                                  for s in topo["tree"]["switches"]}, "default": topo["cluster_default"]}
        else:
            b = topo["block"]
            out[topo["topology"]] = {"blocks": {x["block"]: expand(x["nodes"]) for x in b["blocks"]},
                                     "sizes": b["block_sizes"], "default": topo["cluster_default"]}
    return out


def address(switches: dict, node: str) -> str:
    """SLURM_TOPOLOGY_ADDR as sbatch(1) describes it: the switches from the top level down to the
    leaf switch, then the node, separated by periods."""
    leaf = next(name for name, (_, nodes) in switches.items() if node in nodes)
    parent = {child: name for name, (children, _) in switches.items() for child in children}
    path = [leaf]
    while path[-1] in parent:
        path.append(parent[path[-1]])
    return ".".join([*reversed(path), node])


def check_names(names) -> None:
    for name in names:
        # unique (checked by the reader), at most 64 characters (topology.conf(5)), a hostlist
        # word (no brackets or commas), no '.' (SLURM_TOPOLOGY_ADDR's separator) or ':' (a
        # dynamic node's Topology= separator)
        assert len(name) <= 64 and not set(name) & set("[],.: ="), name


# -- the files, by hand --------------------------------------------------------------------------


@pytest.mark.parametrize("drawing, tree, blocks", [(DRAWN, DRAWN_TREE, DRAWN_BLOCKS),
                                                   (MISSING, MISSING_TREE, MISSING_BLOCKS)])
def test_topology_conf_as_the_documentation_writes_it(drawing, tree, blocks):
    topo, _ = tree_of(drawing)
    t = slurm.build(topo)
    assert body(slurm.tree_conf(t)) == tree
    assert body(slurm.block_conf(t)) == blocks


def test_the_comments_say_how_the_file_was_made_and_what_is_wrong_with_the_labels():
    topo, _ = tree_of(MISSING)
    text = slurm.block_conf(slurm.build(topo))
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert comments[0] == "# topology.conf, TopologyPlugin=topology/block"
    assert "# 3 node(s) lack label network.topology.nvidia.com/accelerator (e.g. h5); each is a domain of its own " \
           "at that level and below" in comments
    assert ("# blocks: the 4 nvlink domains, of 1-2 nodes; BlockSizes 1: the smallest block (no-nvlink-h5), then 2^k "
            "of it while every 2^k neighbouring blocks share one leaf") in comments


def test_topology_yaml_as_the_documentation_writes_it():
    topo, _ = tree_of(DRAWN)
    got = yaml.safe_load(slurm.topology_yaml(slurm.build(topo)))
    # topology.yaml(5) EXAMPLE: "- topology: topo1 / cluster_default: true / tree: / switches: /
    # - switch: sw_root / children: s[1-2] / - switch: s1 / nodes: node[01-02]", and the block
    # topology with "block_sizes" and "blocks: - block: b1 nodes: node[01-04]".
    assert got == [
        {"topology": "railyard-tree", "cluster_default": True, "tree": {"switches": [
            {"switch": "root", "children": "s[1-2]"},
            {"switch": "s1", "children": "s1-l1,l2"},
            {"switch": "s2", "children": "s2-l1"},
            {"switch": "s1-l1", "nodes": "gpu[01-08]"},
            {"switch": "l2", "nodes": "gpu[09-15]"},
            {"switch": "s2-l1", "nodes": "node-[7-10]"}]}},
        {"topology": "railyard-block", "cluster_default": False, "block": {"block_sizes": [3, 6], "blocks": [
            {"block": "n1", "nodes": "gpu[01-04]"},
            {"block": "n2", "nodes": "gpu[05-08]"},
            {"block": "n3", "nodes": "gpu[09-12]"},
            {"block": "n4", "nodes": "gpu[13-15]"},
            {"block": "n5", "nodes": "node-[7-10]"}]}}]


# -- the round trip --------------------------------------------------------------------------


@pytest.mark.parametrize("drawing", [DRAWN, MISSING, topotext.generate(blocks=2, racks=3, nvl=3, nodes=5),
                                     topotext.generate(blocks=1, racks=4, nvl=2, nodes=3, scheme="topograph+clique")])
def test_the_files_read_back_as_the_drawing(drawing):
    topo, nodes = tree_of(drawing)
    t = slurm.build(topo)
    conf = parse_conf(slurm.tree_conf(t))
    blocks = parse_conf(slurm.block_conf(t))
    check_names([*conf["switches"], *blocks["blocks"]])
    # The oracle: each node's labels in the drawing, not railyard's tree.
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
    spine = {name: lab.get(SPINE) for name, lab in labels.items()}

    # Every node under exactly one leaf switch; nodes share a leaf switch iff they share a leaf
    # label under the same spine (a node without one is alone).
    leaves = [nodes_ for _, nodes_ in conf["switches"].values() if nodes_]
    assert sorted(n for group in leaves for n in group) == sorted(labels)
    for group in leaves:
        first = labels[group[0]]
        if first.get(LEAF) is None:
            assert group == [group[0]]
        assert all((labels[n].get(SPINE), labels[n].get(LEAF)) == (first.get(SPINE), first.get(LEAF)) for n in group)
    assert len(leaves) == len({(spine[n], labels[n].get(LEAF) or n) for n in labels})
    # One tree: every switch but one has a parent, and every address starts at that one.
    children = [c for kids, _ in conf["switches"].values() for c in kids]
    assert len(children) == len(set(children)) == len(conf["switches"]) - 1
    tops = {address(conf["switches"], n).split(".")[0] for n in labels}
    assert len(tops) == 1
    # Two nodes' addresses share their first two parts iff they share a spine (plus "root" when
    # there are several spines).
    depth = 2 if len(set(spine.values())) > 1 else 1
    for a in labels:
        for b in labels:
            same = address(conf["switches"], a).split(".")[:depth] == address(conf["switches"], b).split(".")[:depth]
            assert same == (spine[a] == spine[b])

    # Blocks: nodes share a block iff they share the NVLink value under the same leaf; each block
    # holds at least the base size; the sizes grow by powers of two; an aggregate of 2^k neighbours
    # shares one leaf.
    nvl = {n: lab.get(NVL) or lab.get("nvidia.com/gpu.clique") for n, lab in labels.items()}
    place = {n: (spine[n], labels[n].get(LEAF), nvl[n]) if nvl[n] else n for n in labels}
    groups = list(blocks["blocks"].values())
    assert sorted(n for g in groups for n in g) == sorted(labels)
    assert all(len({place[n] for n in g}) == 1 for g in groups) and len(groups) == len(set(place.values()))
    base, *more = blocks["sizes"]
    assert all(len(g) >= base for g in groups)
    for size in more:
        run = size // base
        assert run & (run - 1) == 0
        for i in range(0, len(groups), run):
            assert len({(spine[g[0]], labels[g[0]].get(LEAF)) for g in groups[i:i + run]}) == 1

    # topology.yaml says the same as the two topology.conf files.
    both = parse_yaml(slurm.topology_yaml(t))
    assert both["railyard-tree"]["switches"] == conf["switches"] and both["railyard-tree"]["default"] is True
    assert both["railyard-block"]["blocks"] == blocks["blocks"] and both["railyard-block"]["sizes"] == blocks["sizes"]


def test_names_stay_unique_short_and_safe():
    # Values with '.', a domain named "root", a value repeated at two levels, a 70-character value.
    long = "x" * 63
    drawing = f"""
block root
  rack a.b
    nvl a-b: h1 h2
  rack {long}
    nvl root: h3
block s2
  rack a.b
    nvl n1: h4
  rack {long}
    nvl n2: h5
"""
    topo, _ = tree_of(drawing)
    conf = parse_conf(slurm.tree_conf(slurm.build(topo)))
    check_names(conf["switches"])
    top = [name for name in conf["switches"] if name not in {c for kids, _ in conf["switches"].values() for c in kids}]
    assert top == ["root-2"] and conf["switches"]["root-2"][0] == ["root", "s2"]  # a spine is named root
    assert sorted(n for n in conf["switches"] if "a-b" in n) == ["root-a-b", "s2-a-b"]  # a.b repeats: by path
    # The repeated 63-character leaf: by path, too long, cut to 64 with a digest of the path.
    cut = [n for n in conf["switches"] if n.startswith(("root-xxx", "s2-xxx"))]
    assert len(cut) == 2 and all(len(n) == 64 for n in cut) and cut[0][:55] != cut[1][:55]
    blocks = parse_conf(slurm.block_conf(slurm.build(topo)))
    check_names(blocks["blocks"])
    assert blocks["blocks"]["a-b"] == ["h1", "h2"] and blocks["blocks"]["n1"] == ["h4"]


def test_block_level_and_short_names():
    topo, _ = tree_of("""
block s1
  rack l1
    nvl n1: a1.example.com a2.example.com
  rack l2
    nvl n2: a3.example.com
""")
    t = slurm.build(topo, block_level="leaf", short_names=True)
    assert body(slurm.block_conf(t)) == "BlockName=l1 Nodes=a[1-2]\nBlockName=l2 Nodes=a3\nBlockSizes=1,2\n"
    with pytest.raises(slurm.SlurmTopologyError, match="block level 'rack' is not a level of this cluster "
                                                       r"\(levels: spine, leaf, nvlink\)"):
        slurm.build(topo, block_level="rack")
    clash, _ = tree_of("block s1\n  rack l1\n    nvl n1: a.x a.y\n")
    with pytest.raises(slurm.SlurmTopologyError, match="a.x and a.y would both be a in Slurm"):
        slurm.build(clash, short_names=True)


def test_a_cluster_of_nvlink_levels_only_has_blocks_and_no_tree():
    topo, _ = tree_of("scheme clique\n  rack u1\n    nvl 1: h1 h2\n    nvl 2: h3 h4\n")
    t = slurm.build(topo)
    assert body(slurm.block_conf(t)) == "BlockName=u1-1 Nodes=h[1-2]\nBlockName=u1-2 Nodes=h[3-4]\nBlockSizes=2,4\n"
    with pytest.raises(slurm.SlurmTopologyError, match="no switch tiers"):
        slurm.tree_conf(t)
    (block,) = parse_yaml(slurm.topology_yaml(t)).values()
    assert block["default"] is True


names = st.lists(st.tuples(st.sampled_from(["gpu", "node-", "a1-b", "x"]), st.integers(0, 120), st.sampled_from([0, 2, 3])),
                 min_size=1, max_size=40)


@given(names)
def test_hostlist_expands_to_the_names_it_was_given(parts):
    given_names = list(dict.fromkeys(f"{p}{n:0{w}d}" for p, n, w in parts))
    text = slurm.hostlist(given_names)
    assert sorted(expand(text)) == sorted(given_names)


# -- the command ------------------------------------------------------------------------------


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "extender", *args], capture_output=True, text=True)


def test_railyard_topology_prints_each_format(tmp_path):
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"kind": "NodeList", "items": topotext.load(DRAWN).nodes}))
    r = run("topology", "--nodes", str(nodes), "--format", "slurm-tree")
    assert r.returncode == 0, r.stderr
    assert body(r.stdout) == DRAWN_TREE
    r = run("topology", "--nodes", str(nodes), "--format", "slurm-block")
    assert body(r.stdout) == DRAWN_BLOCKS
    r = run("topology", "--nodes", str(nodes), "--format", "slinky")
    assert body(r.stdout).splitlines()[0] == \
        "kubectl annotate node gpu01 topology.slinky.slurm.net/spec=railyard-tree:s1-l1,railyard-block:n1 --overwrite"


@pytest.mark.parametrize("labelled, args, message", [
    (True, ["--block-level", "rack"], "block level 'rack' is not a level of this cluster (levels: spine, leaf, nvlink)"),
    (False, [], "no topology levels: every node is its own domain"),
])
def test_railyard_topology_bad_input_exits_2_with_one_line(tmp_path, labelled, args, message):
    items = topotext.load(DRAWN).nodes
    if not labelled:
        for n in items:
            n["metadata"]["labels"] = {"kubernetes.io/hostname": n["metadata"]["name"]}
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"kind": "NodeList", "items": items}))
    r = run("topology", "--nodes", str(nodes), "--format", "slurm-yaml", *args)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1
    assert message in r.stderr


def test_railyard_topology_names_the_file_it_cannot_use(tmp_path):
    r = run("topology", "--nodes", str(tmp_path / "nope.json"), "--format", "slurm-tree")
    assert r.returncode == 2 and "nope.json: cannot read" in r.stderr
    twice = tmp_path / "twice.json"
    node = topotext.load("block b\n  rack r\n    nvl n: h1\n").nodes[0]
    twice.write_text(json.dumps({"kind": "NodeList", "items": [node, node]}))
    r = run("topology", "--nodes", str(twice), "--format", "slurm-tree")
    assert r.returncode == 2 and r.stderr == f"railyard topology: {twice}: duplicate node names\n"


# -- the examples in docs/slurm.md -------------------------------------------------------------


def plan(job: str, tmp_path: Path, running: list[dict] = (), without: str = "") -> dict:
    """``job``'s gang planned by ``railyard plan`` (``without``: that pod annotation removed)."""
    (doc,) = yaml.safe_load_all((EXAMPLES / job).read_text())
    doc["spec"]["template"]["metadata"]["annotations"].pop(without, None)
    pending = tmp_path / "pending.json"
    pending.write_text(json.dumps({"kind": "List", "items": job_pods(doc)}))
    args = ["plan", "--nodes", str(EXAMPLES / "nodes.yaml"), "--gang", str(pending)]
    if running:
        (tmp_path / "running.json").write_text(json.dumps({"kind": "List", "items": list(running)}))
        args += ["--pods", str(tmp_path / "running.json")]
    r = run(*args)
    assert r.returncode == 0, r.stderr
    (gang,) = json.loads(r.stdout)["gangs"]
    return gang


def busy(node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"busy-{node}", "namespace": "other", "uid": node},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
            "status": {"phase": "Running"}}


def test_nodes_and_tasks_per_node_is_a_gang_of_whole_nodes(tmp_path):
    gang = plan("nodes-tasks-job.yaml", tmp_path)
    assert gang["feasible"] and len(set(gang["placement"].values())) == 4  # --nodes=4: 4 nodes, 4 GPUs each
    assert gang["level"] == NVL and gang["domain"] == ["s1", "l1", "nvl1"]


def test_switches_is_a_preferred_leaf_that_falls_back_at_once(tmp_path):
    gang = plan("switches-job.yaml", tmp_path)
    assert gang["level"] == LEAF and gang["domain"] == ["s1", "l1"]
    # One node busy in each leaf: no leaf holds 8 pods any more; placed across the spine at once.
    gang = plan("switches-job.yaml", tmp_path, running=[busy("gpu-01"), busy("gpu-09")])
    assert gang["feasible"] and gang["level"] == SPINE
    assert gang["reason"].endswith("; preferred level not available, placed wider")


def test_switches_with_a_time_is_a_preferred_leaf_with_a_bounded_wait(tmp_path):
    (doc,) = yaml.safe_load_all((EXAMPLES / "switches-wait-job.yaml").read_text())
    pods = [ko.Translator("nvidia.com/gpu").pod(p) for p in job_pods(doc)]
    spec = gangspec.build("ml/train-one-leaf-patient", pods, None, 60.0, max_preferred_wait=300.0)
    assert (spec.preferred, spec.preferred_wait_seconds, spec.invalid) == ("leaf", 300.0, ())
    # Where it goes once it no longer waits: as --switches=1@0 (the wait itself: tests/e2e/test_slurm_features.py).
    assert plan("switches-wait-job.yaml", tmp_path)["domain"] == ["s1", "l1"]
    gang = plan("switches-wait-job.yaml", tmp_path, running=[busy("gpu-01"), busy("gpu-09")])
    assert gang["feasible"] and gang["level"] == SPINE


def test_exclusive_topo_takes_an_nvlink_domain_no_other_pod_uses(tmp_path):
    # gpu-01 busy: nvl1 (12 GPUs free) would be the best fit of a shared gang; the exclusive one
    # takes a clean NVLink domain, nvl2 (its leaf has less free than l2's clean domains).
    shared = plan("exclusive-job.yaml", tmp_path, running=[busy("gpu-01")], without="railyard.io/exclusive-topology")
    assert shared["domain"] == ["s1", "l1", "nvl1"]
    gang = plan("exclusive-job.yaml", tmp_path, running=[busy("gpu-01")])
    assert gang["feasible"] and gang["level"] == NVL and gang["domain"] == ["s1", "l1", "nvl2"], gang
    every = [busy(f"gpu-{i:02d}") for i in (1, 5, 9, 13)]  # one node busy in every NVLink domain
    gang = plan("exclusive-job.yaml", tmp_path, running=every)
    assert not gang["feasible"]
    assert gang["reason"] == ("gang ml/bench-exclusive needs 2 pods x 4 GPUs, in nvlink domains no other pod uses; "
                              "the cluster fits 0 (16 nodes in nvlink domains other pods use, 16 GPUs in use)")


def test_segment_is_slices_of_the_block_level(tmp_path):
    gang = plan("segment-job.yaml", tmp_path)
    assert gang["slices"] == {"size": 4, "level": NVL, "count": 2}
    nvlink = [r["domains"][-1]["domain"] for r in gang["ranks"]]
    assert nvlink == ["s1/l1/nvl1"] * 4 + ["s1/l1/nvl2"] * 4
    # Each segment is one of the blocks railyard writes for Slurm.
    blocks = parse_conf(run("topology", "--nodes", str(EXAMPLES / "nodes.yaml"), "--format", "slurm-block").stdout)
    for k in range(2):
        nodes = {r["node"] for r in gang["ranks"][4 * k:4 * k + 4]}
        assert any(nodes <= set(members) for members in blocks["blocks"].values())


def test_the_address_a_member_builds_is_slurms_topology_addr(tmp_path):
    (doc,) = yaml.safe_load_all((EXAMPLES / "topology-addr-job.yaml").read_text())
    gang = plan("topology-addr-job.yaml", tmp_path)
    switches = parse_conf(run("topology", "--nodes", str(EXAMPLES / "nodes.yaml"), "--format", "slurm-tree").stdout)
    container = doc["spec"]["template"]["spec"]["containers"][0]
    fields = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    for member in gang["ranks"]:
        # What the kubelet hands the container: the annotations railyard writes, and spec.nodeName.
        places = tuple(Place(d["level"], d["name"], d["domain"]) for d in member["domains"])
        written = notes.address_annotations(Address(member["pod"], member["node"], member["rank"], None, places))
        env = {"PATH": os.environ["PATH"]}
        for name, path in fields.items():
            key = re.fullmatch(r"metadata\.annotations\['([^']+)'\]", path)
            env[name] = written[key.group(1)] if key else member["node"]
        script = container["command"][2] + 'printf "%s|%s|%s" "$SLURM_TOPOLOGY_ADDR" "$SLURM_TOPOLOGY_ADDR_PATTERN" ' \
                                           '"$SLURM_NODEID"\n'
        out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True).stdout
        addr, pattern, nodeid = out.splitlines()[-1].split("|")
        assert addr == address(switches["switches"], member["node"])
        assert pattern == "switch.switch.node" and addr.count(".") == 2
        assert nodeid == str(member["rank"])


def test_one_clusters_labels_and_slinky_annotations_agree(tmp_path):
    # The annotations and the topology.yaml in examples/slurm/ are written by hand; railyard
    # prints the same from the labels alone.
    spec = yaml.safe_load((EXAMPLES / "nodes.yaml").read_text())
    r = run("topology", "--nodes", str(EXAMPLES / "nodes.yaml"), "--format", "slinky")
    printed = dict(re.fullmatch(r"kubectl annotate node (\S+) topology\.slinky\.slurm\.net/spec=(\S+) --overwrite",
                                line).groups() for line in body(r.stdout).splitlines())
    assert printed == {n["metadata"]["name"]: n["metadata"]["annotations"][slurm.SLINKY_SPEC] for n in spec["items"]}
    r = run("topology", "--nodes", str(EXAMPLES / "nodes.yaml"), "--format", "slurm-yaml")
    assert parse_yaml(r.stdout) == parse_yaml((EXAMPLES / "topology.yaml").read_text())
    # Every unit an annotation names is a leaf switch or a block of that topology.yaml
    # (Slurm's dynamic topology: "A topology unit is the block name, the name of a leaf switch").
    topologies = parse_yaml((EXAMPLES / "topology.yaml").read_text())
    for value in printed.values():
        for pair in value.split(","):
            topology, unit = pair.split(":")
            t = topologies[topology]
            assert unit in t["blocks"] if "blocks" in t else t["switches"][unit][1]


def test_several_fabrics_are_one_file_per_pool_not_one_tree():
    topo, _ = tree_of("scheme topograph-v1\ntier-1 s1\n  tier-0 l1\n    nvl n1: a1 a2\n"
                      "scheme gke\nblock b1\n  rack sb1: g1 g2 g3\n")
    with pytest.raises(slurm.SlurmTopologyError, match=r"^2 fabrics \(gke \(3 nodes\), topograph-v1-2-tiers "
                       r"\(2 nodes\)\): Slurm's topology file describes one tree: give the Nodes of one pool"):
        slurm.build(topo)
