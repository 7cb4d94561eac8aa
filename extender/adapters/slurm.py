"""railyard's topology tree as Slurm's topology files: pure, a ``Topology`` in, text out.

Which level becomes what (docs/slurm.md, "A Slurm topology from railyard's tree"):

- topology/tree: every level above the broadest NVLink level is a tier of switches, the
  narrowest of them the leaf switches (``Nodes=``), the others parents (``Switches=``). When the
  broadest level has more than one domain a ``root`` switch joins them, because Slurm runs no
  job across switches without a common parent, while railyard may place a gang anywhere.
- topology/block: the base blocks are the domains of one level, by default the narrowest NVLink
  level (the GB200 NVL72 rack), else the narrowest level. ``BlockSizes`` starts with the
  smallest block's node count (Slurm: every block must hold at least the base size) and adds
  2^k x base only while every run of 2^k neighbouring blocks (Slurm aggregates neighbours in
  file order, ``block_record.c``) stays inside one domain of the level above: an aggregate
  promises no locality railyard does not see. A larger job Slurm places over the whole topology.

Names follow Slurm's rules (topology.conf(5), slurm.conf(5) NodeName, Slurm 26.05): a switch or
block name is unique, at most 64 characters, read by Slurm's hostlist parser (so no ``[``, ``]``
or ``,``) and free of ``.`` (the separator of SLURM_TOPOLOGY_ADDR) and ``:`` (the separator of a
dynamic node's ``Topology=``). A domain is named by its own label value when that is unique,
else by its path (``s1-l1``); a node without a level's label is a domain of its own, named
``no-<level>-<node>``. Node lists are hostlist expressions (``gpu[01-08]``).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import yaml

from extender.core.cluster.topology import Topology

TREE, BLOCK = "railyard-tree", "railyard-block"
"""The topologies' names in topology.yaml, and in Slinky's node annotation."""
SLINKY_SPEC = "topology.slinky.slurm.net/spec"
"""The Node annotation Slinky's slurm-operator reads (v1.2.1 api/v1beta1/well_known.go)."""
ROOT = "root"
MAX_NAME = 64
"""topology.conf(5): SwitchName "cannot be longer than 64 characters"."""
MAX_BLOCK_LEVEL = 15
"""block_record.c refuses a BlockSizes entry above 2^15 base blocks."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_NUMBERED = re.compile(r"^(.*?)(\d{1,9})$")


class SlurmTopologyError(ValueError):
    """The cluster's levels cannot make the topology asked for; the message says why."""


@dataclass(frozen=True)
class Switch:
    name: str
    switches: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Block:
    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class SlurmTopology:
    """What Slurm is told, before any file format."""

    switches: tuple[Switch, ...]
    """Broadest first, the root (if any) first; empty when no level is a switch tier."""
    blocks: tuple[Block, ...]
    """In railyard's depth-first order: neighbours share the level above where they can."""
    block_sizes: tuple[int, ...]
    leaf_of: dict[str, str]
    """Node -> its leaf switch."""
    block_of: dict[str, str]
    """Node -> its block."""
    notes: tuple[str, ...]
    """Where the files come from, and what railyard noticed about the labels (comment lines)."""
    tree_note: str
    block_note: str


def is_nvlink(topo: Topology, lvl: int) -> bool:
    """An NVLink level of a label preset (``nvlink``, ``nvlink-sub``, ``nvlink-rack``)."""
    name = topo.levels[lvl].name
    return name == "nvlink" or name.startswith("nvlink-")


def build(topo: Topology, block_level: str | None = None, short_names: bool = False) -> SlurmTopology:
    """The switches and blocks of ``topo``. ``block_level``: a level key or short name for the
    base blocks (default: the narrowest NVLink level, else the narrowest). ``short_names``: a
    node's Slurm name is its name up to the first ``.`` (as ``hostname -s`` gives it)."""
    if not topo.depth:
        raise SlurmTopologyError("no topology levels: every node is its own domain (Slurm's topology/flat "
                                 "needs no file)")
    if topo.fabrics:
        pools = ", ".join(f"{f.name} ({f.end - f.start} nodes)" for f in topo.fabrics)
        raise SlurmTopologyError(f"{len(topo.fabrics)} fabrics ({pools}): Slurm's topology file describes "
                                 "one tree: give the Nodes of one pool at a time, or name one tree with --levels")
    node_names = _slurm_names(topo.names, short_names)
    tiers = next((lvl for lvl in range(topo.depth) if is_nvlink(topo, lvl)), topo.depth)
    blevel = _block_level(topo, block_level)
    switches, leaf_of = _switches(topo, tiers, node_names)
    blocks, sizes, block_of = _blocks(topo, blevel, node_names)
    words = [topo.level_word(lvl) for lvl in range(topo.depth)]
    notes = [f"written by `railyard topology` from the labels of {len(topo.names)} nodes; levels "
             f"{' > '.join(words)} (railyard.io/domain.<level> on each gang member)", *topo.problems]
    tree_note = (f"switch tiers: {' > '.join(words[:tiers]) or 'none (every level is an NVLink level)'}"
                 + (f"; {switches[0].name} joins the {topo.domain_count(0)} {words[0]} switches"
                    if switches and topo.domain_count(0) > 1 else ""))
    block_note = _block_note(blocks, sizes, words[blevel], words[blevel - 1] if blevel else "cluster")
    return SlurmTopology(tuple(switches), tuple(blocks), tuple(sizes), leaf_of, block_of, tuple(notes), tree_note,
                         block_note)


def _block_note(blocks: Sequence[Block], sizes: Sequence[int], word: str, parent: str) -> str:
    counts = sorted(len(b.nodes) for b in blocks)
    smallest = next(b.name for b in blocks if len(b.nodes) == counts[0])
    spread = f"{counts[0]}-{counts[-1]}" if counts[0] != counts[-1] else str(counts[0])
    note = (f"blocks: the {len(blocks)} {word} domains, of {spread} nodes; BlockSizes {','.join(map(str, sizes))}: "
            f"the smallest block ({smallest}), then 2^k of it while every 2^k neighbouring blocks share one {parent}")
    if counts[-1] == 1 and len(blocks) > 1:
        note += "; every block holds one node: choose a wider level with --block-level"
    return note


# -- the formats --------------------------------------------------------------------------------


def tree_conf(t: SlurmTopology) -> str:
    """topology.conf for topology/tree: ``SwitchName=... Switches=...|Nodes=...``."""
    if not t.switches:
        raise SlurmTopologyError("no switch tiers: every level of this cluster is an NVLink level "
                                 "(use the block format)")
    lines = [f"SwitchName={s.name} Switches={hostlist(s.switches)}" if s.switches else
             f"SwitchName={s.name} Nodes={hostlist(s.nodes)}" for s in t.switches]
    return _comments("topology.conf, TopologyPlugin=topology/tree", *t.notes, t.tree_note) + "\n".join(lines) + "\n"


def block_conf(t: SlurmTopology) -> str:
    """topology.conf for topology/block: ``BlockName=... Nodes=...`` and ``BlockSizes=``."""
    lines = [f"BlockName={b.name} Nodes={hostlist(b.nodes)}" for b in t.blocks]
    lines.append("BlockSizes=" + ",".join(map(str, t.block_sizes)))
    return _comments("topology.conf, TopologyPlugin=topology/block", *t.notes, t.block_note) + "\n".join(lines) + "\n"


def topology_yaml(t: SlurmTopology) -> str:
    """topology.yaml (Slurm 25.05 and later): the tree (the cluster default) and the blocks."""
    doc: list[dict] = []
    if t.switches:
        doc.append({"topology": TREE, "cluster_default": True, "tree": {"switches": [
            {"switch": s.name, "children": hostlist(s.switches)} if s.switches else
            {"switch": s.name, "nodes": hostlist(s.nodes)} for s in t.switches]}})
    doc.append({"topology": BLOCK, "cluster_default": not t.switches, "block": {
        "block_sizes": list(t.block_sizes),
        "blocks": [{"block": b.name, "nodes": hostlist(b.nodes)} for b in t.blocks]}})
    body = yaml.safe_dump(doc, sort_keys=False, explicit_start=True, width=1 << 16)
    return _comments("topology.yaml (a partition picks one with Topology=)", *t.notes, t.tree_note, t.block_note) + body


def slinky(t: SlurmTopology, nodes: Sequence[str]) -> str:
    """One ``kubectl annotate`` per Kubernetes node: the Slinky annotation naming its leaf switch
    and its block in the topology.yaml above (``<topology>:<unit>``, Slurm's dynamic topology)."""
    lines = []
    for node in nodes:
        units = [f"{TREE}:{t.leaf_of[node]}"] if t.switches else []
        units.append(f"{BLOCK}:{t.block_of[node]}")
        lines.append(f"kubectl annotate node {node} {SLINKY_SPEC}={','.join(units)} --overwrite")
    head = _comments(f"{SLINKY_SPEC} for Slinky's slurm-operator, naming units of the slurm-yaml format",
                     *t.notes, t.tree_note, t.block_note)
    return head + "\n".join(lines) + "\n"


# -- hostlists ------------------------------------------------------------------------------------


def hostlist(names: Sequence[str]) -> str:
    """The names as one Slurm hostlist expression, in order of first appearance: names that end
    in a number share brackets with the others of the same prefix (``h[1-4,7]``); a number with
    leading zeros has a fixed width (``gpu[08-10]``), as slurm.conf(5) NodeName describes."""
    parsed = [(m.group(1), m.group(2)) if (m := _NUMBERED.match(n)) and m.group(1) else (n, "") for n in names]
    fixed = {(p, len(d)) for p, d in parsed if len(d) > 1 and d.startswith("0")}
    groups: dict[tuple[str, int], list[int]] = {}
    for prefix, digits in parsed:
        if not digits:
            groups.setdefault((prefix, -1), [])
            continue
        width = len(digits) if (prefix, len(digits)) in fixed else 0
        groups.setdefault((prefix, width), []).append(int(digits))
    out = []
    for (prefix, width), numbers in groups.items():
        if width < 0:
            out.append(prefix)
            continue
        numbers = sorted(set(numbers))
        if len(numbers) == 1:
            out.append(f"{prefix}{numbers[0]:0{width}d}" if width else f"{prefix}{numbers[0]}")
            continue
        runs: list[list[int]] = []
        for n in numbers:
            if runs and runs[-1][1] == n - 1:
                runs[-1][1] = n
            else:
                runs.append([n, n])
        text = ",".join(f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}" for a, b in runs)
        out.append(f"{prefix}[{text}]")
    return ",".join(out)


# -- building blocks ----------------------------------------------------------------------------


def _block_level(topo: Topology, asked: str | None) -> int:
    if asked is not None:
        lvl = topo.level_index(asked)
        if lvl is None or lvl >= topo.depth:
            known = ", ".join(topo.level_word(i) for i in range(topo.depth))
            raise SlurmTopologyError(f"block level {asked!r} is not a level of this cluster (levels: {known})")
        return lvl
    nvlink = [lvl for lvl in range(topo.depth) if is_nvlink(topo, lvl)]
    return nvlink[-1] if nvlink else topo.depth - 1


def _switches(topo: Topology, tiers: int, node_names: Sequence[str]) -> tuple[list[Switch], dict[str, str]]:
    if not tiers:
        return [], {}
    domains = [(lvl, d) for lvl in range(tiers) for d in range(topo.domain_count(lvl))]
    named = dict(zip(domains, _unique([_path(topo, lvl, d) for lvl, d in domains])))
    out: list[Switch] = []
    leaf_of: dict[str, str] = {}
    for lvl, d in domains:
        dom = topo.domain(lvl, d)
        if lvl < tiers - 1:
            out.append(Switch(named[lvl, d], switches=tuple(named[lvl + 1, c] for c in topo.children(lvl, d))))
        else:
            out.append(Switch(named[lvl, d], nodes=tuple(node_names[dom.start:dom.end])))
            leaf_of.update((topo.names[i], named[lvl, d]) for i in range(dom.start, dom.end))
    top = [named[0, d] for d in range(topo.domain_count(0))]
    if len(top) > 1:
        taken = set(named.values())
        root = next(n for n in itertools.chain([ROOT], (f"{ROOT}-{i}" for i in itertools.count(2))) if n not in taken)
        out.insert(0, Switch(root, switches=tuple(top)))
    return out, leaf_of


def _blocks(topo: Topology, lvl: int, node_names: Sequence[str]) -> tuple[list[Block], list[int], dict[str, str]]:
    count = topo.domain_count(lvl)
    names = _unique([_path(topo, lvl, d) for d in range(count)])
    blocks: list[Block] = []
    block_of: dict[str, str] = {}
    for d, name in enumerate(names):
        dom = topo.domain(lvl, d)
        blocks.append(Block(name, tuple(node_names[dom.start:dom.end])))
        block_of.update((topo.names[i], name) for i in range(dom.start, dom.end))
    base = min(len(b.nodes) for b in blocks)
    sizes = [base]
    parents = topo.parent[lvl]
    for k in range(1, MAX_BLOCK_LEVEL + 1):
        group = 1 << k
        if group // 2 >= count or not lvl:
            break
        runs = [parents[i:i + group] for i in range(0, count, group)]
        if any(len(set(run)) > 1 for run in runs):
            break
        sizes.append(base * group)
    return blocks, sizes, block_of


def _path(topo: Topology, lvl: int, d: int) -> tuple[str, ...]:
    """The domain's path as name parts: each value made safe, a missing one ``no-<level>-<node>``
    (such a domain holds its one node)."""
    node = topo.names[topo.start[lvl][d]]
    return tuple(_UNSAFE.sub("-", v) if v is not None else f"no-{_UNSAFE.sub('-', topo.level_word(i))}-{node}"
                 for i, v in enumerate(topo.paths[lvl][d]))


def _unique(paths: Sequence[tuple[str, ...]]) -> list[str]:
    """Each path's own last part where no other path ends the same, else the whole path joined;
    a name still shared or too long gets a digest of its path."""
    counts = Counter(p[-1] for p in paths)
    names = [p[-1] if counts[p[-1]] == 1 else "-".join(p) for p in paths]
    counts = Counter(names)
    for i, (name, path) in enumerate(zip(names, paths)):
        if counts[name] > 1 or len(name) > MAX_NAME:
            digest = hashlib.sha1("/".join(path).encode()).hexdigest()[:8]
            names[i] = f"{name[:MAX_NAME - 9]}-{digest}"
    if len(set(names)) != len(names):
        raise SlurmTopologyError(f"cannot name {len(paths)} domains uniquely for Slurm")  # a digest collision
    return names


def _slurm_names(names: Sequence[str], short: bool) -> list[str]:
    if not short:
        return list(names)
    out = [n.split(".", 1)[0] for n in names]
    shared = [n for n, c in Counter(out).items() if c > 1]
    if shared:
        first = [n for n in names if n.split(".", 1)[0] == shared[0]][:2]
        raise SlurmTopologyError(f"--short-names: {' and '.join(first)} would both be {shared[0]} in Slurm")
    return out


def _comments(*lines: str) -> str:
    return "".join(f"# {line}\n" for line in lines)
