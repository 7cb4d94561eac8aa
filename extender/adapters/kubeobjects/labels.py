"""Topology label presets: which node labels name which levels, broadest first, and the
level detection behind the core's ``LabelScheme`` port."""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from extender.core.model import Level, LevelChoice, NodeFacts

CLIQUE = "nvidia.com/gpu.clique"
CLIQUE_CLUSTER = "nvidia.com/gpu.clique:cluster"
"""Derived level: the ClusterUUID prefix of nvidia.com/gpu.clique, the physical NVLink domain."""

_TOPOGRAPH = "network.topology.nvidia.com/"
_TOPOGRAPH_V1_TIER = re.compile(r"^fabric\.topograph\.run/tier-(\d+)$")

PRESETS: dict[str, tuple[Level, ...]] = {
    "topograph": (
        Level(_TOPOGRAPH + "core", "core"),
        Level(_TOPOGRAPH + "datacenter", "datacenter"),
        Level(_TOPOGRAPH + "block", "block"),
        Level(_TOPOGRAPH + "spine", "spine"),
        Level(_TOPOGRAPH + "leaf", "leaf"),
        Level(_TOPOGRAPH + "accelerator", "nvlink"),
    ),
    # Tiers are added from the labels found (tier-0 is closest to the node; no fixed depth).
    "topograph-v1": (
        Level("accelerator.topograph.run/domain", "nvlink"),
        Level("accelerator.topograph.run/sub-domain", "nvlink-sub"),
    ),
    "gke": (
        Level("cloud.google.com/gce-topology-block", "block"),
        Level("cloud.google.com/gce-topology-subblock", "subblock"),
        Level("cloud.google.com/gce-topology-host", "gce-host"),
    ),
    "eks": tuple(Level(f"topology.k8s.aws/network-node-layer-{i}", f"layer-{i}") for i in range(1, 5)),
    "oci": (
        Level("oci.oraclecloud.com/host.network_block_id", "block"),
        Level("oci.oraclecloud.com/host.rack_id", "rack"),
    ),
    "clique": (
        Level(CLIQUE_CLUSTER, "nvlink-rack", prefix_of=CLIQUE),
        Level(CLIQUE, "nvlink"),
    ),
}
NVLINK_KEYS = frozenset({_TOPOGRAPH + "accelerator", "accelerator.topograph.run/domain"})
"""Presets whose own NVLink level makes the clique label redundant."""


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


def detect_levels(nodes: Sequence[NodeFacts]) -> LevelChoice:
    """Pick the levels from the labels nodes carry, with one preset for the switch tree.

    The preset carried by the most nodes wins; nodes that carry another switch-tree preset's
    labels are reported, not merged. ``nvidia.com/gpu.clique`` adds the NVLink levels under
    any switch tree that has none of its own.
    """
    labels = [n.labels for n in nodes]

    def name(i: int) -> str:
        return nodes[i].name or "?"

    carriers: dict[str, list[int]] = {}
    for i, lab in enumerate(labels):
        for preset in _presets_of(lab):
            carriers.setdefault(preset, []).append(i)
    trees = [p for p in PRESETS if p != "clique" and p in carriers]
    problems: list[str] = []
    if not trees and "clique" not in carriers:
        return LevelChoice((), None, ("no known topology labels on any node; each node is its own domain",))
    primary = max(trees, key=lambda p: len(carriers[p])) if trees else None
    levels: list[Level] = []
    if primary is not None:
        present = {k for lab in labels for k in lab}
        if primary == "topograph-v1":
            tiers = sorted(
                (int(m.group(1)) for k in present if (m := _TOPOGRAPH_V1_TIER.match(k))), reverse=True
            )
            levels += [Level(f"fabric.topograph.run/tier-{t}", f"tier-{t}") for t in tiers]
        levels += [lvl for lvl in PRESETS[primary] if lvl.key in present]
        for other in trees:
            if other != primary:
                idx = carriers[other]
                problems.append(
                    f"{len(idx)} node(s) also carry {other} labels (e.g. {name(idx[0])}); "
                    f"using {primary}; set --levels to choose"
                )
        without = len(labels) - len(carriers[primary])
        if without:
            missing = next(i for i in range(len(labels)) if i not in set(carriers[primary]))
            problems.append(f"{without} node(s) carry no {primary} labels (e.g. {name(missing)})")
    if "clique" in carriers:
        if any(lvl.key in NVLINK_KEYS for lvl in levels):
            problems.append(f"{CLIQUE} ignored: {primary} already names the NVLink domain")
        else:
            levels += PRESETS["clique"]
    return LevelChoice(tuple(levels), primary or "clique", tuple(problems))


class _Scheme:
    """The label presets as the core's ``LabelScheme`` port."""

    def detect(self, nodes: Sequence[NodeFacts]) -> LevelChoice:
        return detect_levels(nodes)

    def schemes_of(self, node: NodeFacts) -> frozenset[str]:
        return frozenset(_presets_of(node.labels))

    def explicit(self, keys: Sequence[str]) -> LevelChoice:
        return explicit_levels(keys)


SCHEME = _Scheme()


def _presets_of(labels: Mapping[str, str]) -> set[str]:
    found = set()
    for key in labels:
        if key.startswith(_TOPOGRAPH):
            found.add("topograph")
        elif _TOPOGRAPH_V1_TIER.match(key) or key.startswith("accelerator.topograph.run/"):
            found.add("topograph-v1")
        elif key.startswith("cloud.google.com/gce-topology-"):
            found.add("gke")
        elif key.startswith("topology.k8s.aws/network-node-layer-"):
            found.add("eks")
        elif key.startswith("oci.oraclecloud.com/host.") and key in (
            "oci.oraclecloud.com/host.network_block_id", "oci.oraclecloud.com/host.rack_id"):
            found.add("oci")
        elif key == CLIQUE:
            found.add("clique")
    return found
