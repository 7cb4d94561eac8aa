"""Scenario data files: ``bench/scenarios/NAME.yaml``.

A file has a ``full`` and a ``quick`` section, each with a ``topology`` and a ``workload``; the
keys are documented in bench/README.md. ``topology`` is a topotext generator line
(``blocks=2 racks=8 nvl=2 nodes=8 gpus=8``) or a mapping whose ``nodes`` may be a ``[lo, hi]``
range: then every NVLink domain gets a seeded random size in that range (real clusters have
NVLink domains of 4-18 nodes), drawn as a topotext drawing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"

#: Topology label keys (topotext scheme ``topograph``: a drawing's block is Topograph's spine),
#: broadest first; hostname is implied.
LEVEL_KEYS = {
    "block": "network.topology.nvidia.com/spine",
    "leaf": "network.topology.nvidia.com/leaf",
    "nvl": "network.topology.nvidia.com/accelerator",
}
HOSTNAME = "kubernetes.io/hostname"


class ScenarioError(ValueError):
    """A scenario file is missing or malformed; the message names the file and the key."""


@dataclass(frozen=True)
class Scenario:
    name: str
    mode: str
    """``full`` or ``quick``."""
    seed: int
    arms: tuple[str, ...]
    topology_text: str
    """What ``cluster up --topology`` gets: a generator line or a drawing."""
    workload: dict[str, Any]
    description: str
    source: Path


def names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def load(name_or_path: str, quick: bool) -> Scenario:
    path = Path(name_or_path)
    if not path.is_file():
        path = SCENARIO_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ScenarioError(f"no scenario {name_or_path!r} (known: {', '.join(names())})")
    doc = yaml.safe_load(path.read_text())
    mode = "quick" if quick else "full"
    try:
        section = doc[mode]
        seed = int(doc.get("seed", 1))
        arms = tuple(str(a) for a in doc.get("arms", ["A", "B", "C", "D"]))
        topology = topology_text(section["topology"], seed)
        workload = dict(section["workload"])
    except (KeyError, TypeError) as exc:
        raise ScenarioError(f"{path}: missing or malformed key {exc}") from None
    return Scenario(name=doc.get("name", path.stem), mode=mode, seed=seed, arms=arms,
                    topology_text=topology, workload=workload,
                    description=str(doc.get("description", "")).strip(), source=path)


def topology_text(spec: str | dict[str, Any], seed: int) -> str:
    """A generator line as is; a mapping with a ``nodes: [lo, hi]`` range becomes a drawing."""
    if isinstance(spec, str):
        return spec
    blocks, racks, nvl, gpus = (int(spec[k]) for k in ("blocks", "racks", "nvl", "gpus"))
    nodes = spec["nodes"]
    if isinstance(nodes, int):
        return f"blocks={blocks} racks={racks} nvl={nvl} nodes={nodes} gpus={gpus} scheme=topograph"
    lo, hi = (int(x) for x in nodes)
    rng = random.Random(seed * 7919 + 1)
    out = ["scheme topograph", f"gpus {gpus}"]
    for b in range(1, blocks + 1):
        out.append(f"block b{b}")
        for r in range(1, racks + 1):
            out.append(f"  rack r{r}")
            for n in range(1, nvl + 1):
                size = rng.randint(lo, hi)
                out.append(f"    nvl n{n}: " + " ".join(f"b{b}-r{r}-n{n}-h{h}" for h in range(1, size + 1)))
    return "\n".join(out) + "\n"
