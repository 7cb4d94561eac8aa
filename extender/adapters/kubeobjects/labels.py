"""Topology label presets: which node labels name which levels, broadest first, and the
level detection behind the core's ``LabelScheme`` port.

Each preset is taken from its own project's documentation or source (tests/fixtures/labels/
holds a documented example of each, with the file and tag it came from):

- ``topograph-v1``: NVIDIA Topograph v1.0.0 ``docs/reference/node-labels.md``: fabric tier 0 is
  the switch closest to the node, numbers grow outwards, no fixed depth; the accelerator
  sub-domain is nested in the domain.
- ``topograph``: Topograph v0.3.0-v0.5.0 ``pkg/engines/k8s/labeler.go``: leaf (switches that
  connect compute nodes) < spine < core.
- ``topograph-v0.1``: Topograph v0.1.0, the same tiers before commit 3abaae8 renamed them:
  block (switches that connect compute nodes) < spine < datacenter.
- ``gke``: gce-topology-host < subblock < block (Google Cloud, TAS on GKE).
- ``eks``: network-node-layer-1 is the top of the AWS network, 3 (or 4) the bottom (EKS guide).
- ``oci``: rdma.local_block_id (tier 0) < network_block_id < hpc_island_id (oracle-quickstart/
  oci-hpc-oke); ``oci-host``: host.rack_id < host.network_block_id.
- ``clique``: ``nvidia.com/gpu.clique`` = ``<ClusterUUID>.<CliqueID>`` (GPU Feature Discovery).
- ``rail-group``: railyard's own ``railyard.io/rail-group``: the nodes that share one set of rail
  switches (docs/dra.md, rails); no project labels rail groups yet. Like ``clique`` it adds a level
  under any switch tree, above the NVLink levels.

Topograph never removes labels of an older scheme when it writes a newer one (v0.3 merges
labels in; v1.0.0 ``isManagedLevelLabel`` only clears its own keys), so an upgraded node can
carry two schemes. The newer one is current: a node's older Topograph labels are ignored and
reported, never mixed into its path.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Mapping, Sequence

from extender.core.model import FABRIC_LEVEL, Level, LevelChoice, NodeFacts

CLIQUE = "nvidia.com/gpu.clique"
CLIQUE_CLUSTER = "nvidia.com/gpu.clique:cluster"
"""Derived level: the ClusterUUID prefix of nvidia.com/gpu.clique, the physical NVLink domain."""
RAIL_GROUP = "railyard.io/rail-group"
"""The nodes that share one set of rail switches (GPU i of each reaches rail switch i)."""

_TOPOGRAPH = "network.topology.nvidia.com/"
NUMBERED = {"topograph-v1": ("tier-", "fabric.topograph.run/tier-"),
            "eks": ("layer-", "topology.k8s.aws/network-node-layer-")}
"""Presets whose levels are numbered: the short name's prefix and the label key's
(``tier-3`` is ``fabric.topograph.run/tier-3``). Topograph v1's fabric tiers have no fixed depth."""
_TOPOGRAPH_V1_TIER = re.compile("^" + re.escape(NUMBERED["topograph-v1"][1]) + r"(\d+)$")
_OCI_RDMA = "oci.oraclecloud.com/rdma."
_OCI_HOST = "oci.oraclecloud.com/host."
OCI_NO_DATA = "no-imds-data"
"""The value the OCI labeler writes when the instance metadata has no RDMA locality: no domain."""

PRESETS: dict[str, tuple[Level, ...]] = {
    # Tiers are added from the labels found (tier-0 is closest to the node; no fixed depth).
    "topograph-v1": (
        Level("accelerator.topograph.run/domain", "nvlink"),
        Level("accelerator.topograph.run/sub-domain", "nvlink-sub"),
    ),
    "topograph": (
        Level(_TOPOGRAPH + "core", "core"),
        Level(_TOPOGRAPH + "spine", "spine"),
        Level(_TOPOGRAPH + "leaf", "leaf"),
        Level(_TOPOGRAPH + "accelerator", "nvlink"),
    ),
    "topograph-v0.1": (
        Level(_TOPOGRAPH + "datacenter", "datacenter"),
        Level(_TOPOGRAPH + "spine", "spine"),
        Level(_TOPOGRAPH + "block", "block"),
        Level(_TOPOGRAPH + "accelerator", "nvlink"),
    ),
    "gke": (
        Level("cloud.google.com/gce-topology-block", "block"),
        Level("cloud.google.com/gce-topology-subblock", "subblock"),
        Level("cloud.google.com/gce-topology-host", "gce-host"),
    ),
    "eks": tuple(Level(f"{NUMBERED['eks'][1]}{i}", f"{NUMBERED['eks'][0]}{i}") for i in range(1, 5)),
    "oci": tuple(
        Level(_OCI_RDMA + key, name, missing=OCI_NO_DATA)
        for key, name in (("hpc_island_id", "hpc-island"), ("network_block_id", "network-block"),
                          ("local_block_id", "local-block"))
    ),
    "oci-host": (
        Level(_OCI_HOST + "network_block_id", "network-block"),
        Level(_OCI_HOST + "rack_id", "rack"),
    ),
    "clique": (
        Level(CLIQUE_CLUSTER, "nvlink-rack", prefix_of=CLIQUE),
        Level(CLIQUE, "nvlink"),
    ),
    "rail-group": (Level(RAIL_GROUP, "rail-group"),),
}
_ADDED = ("rail-group", "clique")
"""Presets that add levels under the switch tree instead of being one, in this order."""
NVLINK_KEYS = frozenset({_TOPOGRAPH + "accelerator", "accelerator.topograph.run/domain"})
"""Presets whose own NVLink level makes the clique label redundant."""

_KEY_PRESET = {lvl.key: name for name, levels in PRESETS.items() for lvl in levels
               if name != "clique" and not lvl.key.startswith(_TOPOGRAPH)}
_KEY_PRESET[CLIQUE] = "clique"
_PRE_V1 = {
    **{_TOPOGRAPH + k: "topograph" for k in ("leaf", "core")},
    **{_TOPOGRAPH + k: "topograph-v0.1" for k in ("block", "datacenter")},
    **{_TOPOGRAPH + k: "either" for k in ("spine", "accelerator")},
}
"""Pre-v1 Topograph key -> its scheme; spine and accelerator belong to both."""


def level_key(preset: str, name: str) -> str:
    """The label key of a preset's level by its short name (``leaf``; ``tier-3`` or ``layer-2``
    in a numbered preset): how the text topology format's words become labels."""
    for lvl in PRESETS[preset]:
        if lvl.name == name:
            return lvl.key
    name_prefix, key_prefix = NUMBERED.get(preset, ("", ""))
    if name_prefix and name.startswith(name_prefix) and name[len(name_prefix):].isdigit():
        return key_prefix + name[len(name_prefix):]
    raise KeyError(f"preset {preset} has no level named {name!r}")


def explicit_levels(keys: Sequence[str]) -> LevelChoice:
    """``--levels K1,K2``: keys as given, broadest first; known keys keep their short names."""
    known = {lvl.key: lvl for preset in PRESETS.values() for lvl in preset}
    problems = []
    seen = set()
    levels = []
    for key in keys:
        key = key.strip()
        if not key:
            continue
        if key in seen:
            problems.append(f"level {key} listed twice; kept the first")
            continue
        if key == "kubernetes.io/hostname":
            problems.append("kubernetes.io/hostname is always the narrowest level; not listed again")
            continue
        seen.add(key)
        m = _TOPOGRAPH_V1_TIER.match(key)
        levels.append(known.get(key) or Level(key, f"tier-{m.group(1)}" if m else ""))
    return LevelChoice(tuple(levels), None, tuple(problems))


UNLABELLED = "unlabelled"
"""The pool of nodes that carry no known topology labels, in a cluster of several fabrics."""


def fabric_of(labels: Mapping[str, str]) -> str:
    """The node pool a node's labels put it in: its switch-tree preset (the newest Topograph
    first), with the number of fabric tiers for Topograph v1 (tiers count from the node, so two
    depths are two trees); else ``clique`` or ``rail-group`` alone; else ``UNLABELLED``. Pre-v1
    Topograph is one pool, ``topograph``, whichever of its two schemes (a node with only the keys
    they share fits both; the pool's majority decides, as for a whole cluster)."""
    found, _ = _classify(labels)
    tree = next((p for p in PRESETS if p not in _ADDED and p in found), None)
    if tree == "topograph-v1":
        tiers = 1 + max(int(m.group(1)) for k in labels if (m := _TOPOGRAPH_V1_TIER.match(k)))
        return f"topograph-v1-{tiers}-tiers"
    if tree == "topograph-v0.1":
        return "topograph"
    return tree or next((p for p in _ADDED if p in found), UNLABELLED)


def detect_levels(nodes: Sequence[NodeFacts]) -> LevelChoice:
    """Pick the levels from the labels nodes carry.

    One fabric (every labelled node of one switch-tree preset, and one depth of Topograph v1
    tiers): that preset's levels, as before. Several: the broadest level is ``FABRIC_LEVEL``,
    one domain per pool (``fabric_of``, as ``NodeFacts.fabric`` says), then each pool's own
    levels, tagged with it (``Level.fabric``), so each pool is planned on its own tree. (The
    node translator stamps the same ``fabric_of`` on each ``NodeFacts``.)
    ``nvidia.com/gpu.clique`` adds the NVLink levels under any switch tree that has none of
    its own.
    """
    pools: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        pools.setdefault(fabric_of(node.labels), []).append(i)
    known = {p: idx for p, idx in pools.items() if p != UNLABELLED}
    if len(known) < 2:
        return _tree(nodes, range(len(nodes)))
    order = sorted(pools, key=lambda p: (p == UNLABELLED, -len(pools[p]), p))
    levels: list[Level] = [Level(FABRIC_LEVEL, "fabric")]
    problems = [f"{len(order)} fabrics, each planned on its own tree; a gang never spans two: "
                + ", ".join(f"{p} ({len(pools[p])} node(s), e.g. {nodes[pools[p][0]].name})" for p in order)]
    for pool in order:
        choice = _tree(nodes, pools[pool])
        levels += [replace(lvl, fabric=pool) for lvl in choice.levels]
        problems += [f"pool {pool}: {text}" for text in choice.problems
                     if not text.startswith("no known topology labels")]
    return LevelChoice(tuple(levels), "fabrics", tuple(problems))


def _tree(nodes: Sequence[NodeFacts], among: Sequence[int]) -> LevelChoice:
    """The levels of the nodes ``among``, with one preset for the switch tree.

    The preset carried by the most nodes wins (ties: the order of PRESETS, newest Topograph
    first); nodes that carry another switch-tree preset instead are reported, not merged.
    """
    def name(i: int) -> str:
        return nodes[i].name or "?"

    carriers: dict[str, list[int]] = {}
    stale: dict[str, list[int]] = {}
    for i in among:
        found, old = _classify(nodes[i].labels)
        for preset in found:
            carriers.setdefault(preset, []).append(i)
        if old:
            stale.setdefault(old, []).append(i)
    trees = [p for p in PRESETS if p not in _ADDED and p in carriers]
    problems: list[str] = []
    if not trees and not any(p in carriers for p in _ADDED):
        return LevelChoice((), None, ("no known topology labels on any node; each node is its own domain",))
    primary = max(trees, key=lambda p: len(carriers[p])) if trees else None
    levels: list[Level] = []
    if primary is not None:
        mine = set(carriers[primary])
        present = {k for i in mine for k in nodes[i].labels}
        if primary == "topograph-v1":
            tiers = sorted((int(m.group(1)) for k in present if (m := _TOPOGRAPH_V1_TIER.match(k))), reverse=True)
            levels += [Level(level_key(primary, f"tier-{t}"), f"tier-{t}") for t in tiers]
        levels += [lvl for lvl in PRESETS[primary] if lvl.key in present]
        for old, carried in stale.items():
            if idx := [i for i in carried if i in mine]:
                problems.append(f"{len(idx)} node(s) also carry {old} labels (e.g. {name(idx[0])}); "
                                f"ignored there: the newer Topograph labels are current")
        for other in trees:
            if other != primary and (idx := [i for i in carriers[other] if i not in mine]):
                problems.append(
                    f"{len(idx)} node(s) carry {other} labels instead (e.g. {name(idx[0])}); "
                    f"using {primary}; set --levels to choose"
                )
        if without := [i for i in among if i not in mine]:
            problems.append(f"{len(without)} node(s) carry no {primary} labels (e.g. {name(without[0])})")
        for value in dict.fromkeys(lvl.missing for lvl in levels if lvl.missing):
            at = [lvl.key for lvl in levels if lvl.missing == value]
            if idx := [i for i in mine if any(nodes[i].labels.get(k) == value for k in at)]:
                at = [k for k in at if any(nodes[i].labels.get(k) == value for i in idx)]
                problems.append(f"{len(idx)} node(s) carry {value} (e.g. {name(idx[0])}) at {', '.join(at)}: "
                                "its labeler knows no domain there; each such node is a domain of its own")
    if "rail-group" in carriers:
        levels += PRESETS["rail-group"]
    if "clique" in carriers:
        if any(lvl.key in NVLINK_KEYS for lvl in levels):
            problems.append(f"{CLIQUE} ignored: {primary} already names the NVLink domain")
        else:
            levels += PRESETS["clique"]
    return LevelChoice(tuple(levels), primary or next(p for p in _ADDED if p in carriers), tuple(problems))


class _Scheme:
    """The label presets as the core's ``LabelScheme`` port."""

    def detect(self, nodes: Sequence[NodeFacts]) -> LevelChoice:
        return detect_levels(nodes)

    def schemes_of(self, node: NodeFacts) -> frozenset[str]:
        return frozenset(_classify(node.labels)[0]) | {fabric_of(node.labels)}

    def explicit(self, keys: Sequence[str]) -> LevelChoice:
        return explicit_levels(keys)


SCHEME = _Scheme()


def _classify(labels: Mapping[str, str]) -> tuple[set[str], str]:
    """The presets a node's labels belong to, and which older Topograph labels it carries in
    vain (Topograph leaves them in place when it writes a newer scheme)."""
    found, pre_v1 = set(), set()
    for key in labels:
        if _TOPOGRAPH_V1_TIER.match(key):
            found.add("topograph-v1")
        elif key in _PRE_V1:
            pre_v1.add(_PRE_V1[key])
        elif preset := _KEY_PRESET.get(key):
            found.add(preset)
    if pre_v1 and "topograph-v1" in found:
        return found, "pre-v1 Topograph (network.topology.nvidia.com/*)"
    if {"topograph", "topograph-v0.1"} <= pre_v1:
        return found | {"topograph"}, "Topograph v0.1 (network.topology.nvidia.com/block, datacenter)"
    if pre_v1 == {"either"}:  # only spine and accelerator, keys both pre-v1 schemes share
        pre_v1 = {"topograph", "topograph-v0.1"}
    return found | (pre_v1 - {"either"}), ""
