"""``railyard plan``: where would these gangs go, and if nowhere, why? Offline, no cluster."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from extender.adapters import kubeobjects as ko
from extender.adapters.answers import plan_json
from extender.commands import output
from extender.core.model import HOST_LEVEL, LevelChoice, NodeFacts
from extender.service.whatif import WhatIf
from extender.settings import DEFAULT_GPU_RESOURCE as GPU_RESOURCE


class InputError(Exception):
    """One line naming the file and the problem."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="offline what-if: plan pending gangs against a node list",
        description="Plan pending gangs against nodes and running pods read from files "
        "(Kubernetes Lists in JSON or YAML, as `kubectl get ... -o json` prints them). Any file may "
        "also hold DRA objects (DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate): "
        "`kubectl get nodes,deviceclasses,resourceslices -o json` is a valid --nodes.",
    )
    p.add_argument("--nodes", required=True, help="Nodes (a List or NodeList), and optionally DeviceClasses and "
                                                  "ResourceSlices")
    p.add_argument("--pods", help="pods already on nodes; their GPUs are in use (and their ResourceClaims)")
    p.add_argument("--gang", required=True, metavar="PENDING",
                   help="pods to place (and optional PodGroups, JobSets, LeaderWorkerSets, Jobs, ResourceClaims, "
                        "ResourceClaimTemplates); "
                        "gangs are planned in order of first appearance")
    p.add_argument("--levels", help="topology label keys, broadest first (default: detected from node labels)")
    p.add_argument("--gpu-resource", default=GPU_RESOURCE, help=f"extended resource name (default {GPU_RESOURCE})")
    p.add_argument("--rail-attribute", default="", metavar="ATTRIBUTE",
                   help="DRA device attribute naming each GPU's rail (dra.rail_attribute); gangs of "
                        "partial-node members are then planned rail-aligned (docs/dra.md)")
    p.add_argument("--verbose", action="store_true", help="also print topology problems on stderr")
    output.add_flag(p, "tty")
    p.set_defaults(func=run)


GROUP_KINDS = {"PodGroup", "JobSet", "LeaderWorkerSet", "Job"}
"""Objects read as group objects (by apiVersion): every convention's PodGroup, and the workloads
railyard sizes gangs from (docs/workloads.md)."""

def run(args: argparse.Namespace) -> int:
    # Translated here, once: the what-if planner takes facts, as the live extender does.
    translate = ko.Translator(args.gpu_resource)
    try:
        nodes, node_facts, levels = read_nodes(args.nodes, args.levels, translate)
        pods = _objects(args.pods, {"Pod", *GROUP_KINDS}) if args.pods else []
        pending = _objects(args.gang, {"Pod", *GROUP_KINDS})
    except InputError as exc:
        print(f"railyard plan: {exc}", file=sys.stderr)
        return 2
    everything = nodes + pods + pending
    groups = [translate.group(o) for o in everything if o["kind"] in GROUP_KINDS]
    dra = [translate.dra(o["kind"], o) for o in everything if o["kind"] in ko.DRA_KINDS]
    whatif = WhatIf.load(node_facts, levels, [translate.pod(o) for o in pods if o["kind"] == "Pod"], groups,
                         dra, args.gpu_resource, args.rail_attribute)
    answers = whatif.plan_pending(translate.pod(o) for o in pending if o["kind"] == "Pod")
    topology: dict[str, Any] = {"levels": [lvl.key for lvl in whatif.state.levels], "problems": whatif.problems}
    fabrics: dict[str, list[str]] = {}
    for lvl in whatif.state.levels:
        if lvl.fabric:
            fabrics.setdefault(lvl.fabric, []).append(lvl.key)
    if fabrics:
        topology["fabrics"] = fabrics  # each pool's own levels, broadest first
    out = {"gangs": [plan_json(a) for a in answers], "topology": topology}
    if output.wants_json(args, sys.stdout):
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        names = {HOST_LEVEL: "node", **{lvl.key: lvl.name or lvl.key for lvl in whatif.state.levels}}
        print(render(out, names))
    if args.verbose:
        for problem in whatif.problems:
            print(f"railyard plan: {problem}", file=sys.stderr)
    return 0


MAX_NODES_SHOWN = 8
"""Nodes named per gang in the table; the rest are counted (``-o json`` has every member's)."""


def render(out: dict[str, Any], level_names: dict[str, str]) -> str:
    """The plan as a person reads it: one row per gang, then why each gang that does not fit
    does not, then the topology's levels."""
    rows = [("GANG", "FITS", "WITHIN", "PODS", "NODES")]
    for g in out["gangs"]:
        nodes = list(dict.fromkeys(g["placement"].values()))
        shown = " ".join(nodes[:MAX_NODES_SHOWN]) + (f" (+{len(nodes) - MAX_NODES_SHOWN} more)"
                                                     if len(nodes) > MAX_NODES_SHOWN else "")
        within = "-"
        if g["feasible"]:
            path = "/".join(d or "-" for d in g["domain"] or ()) or "the cluster"
            within = f"{level_names.get(g['level'], g['level'])} {path}" if g["level"] else path
        rows.append((g["gang"], "yes" if g["feasible"] else "no", within,
                     str(len(g["placement"])) if g["feasible"] else "-", shown or "-"))
    lines = output.table(rows, indent="")
    unplaced = [g for g in out["gangs"] if not g["feasible"]]
    if unplaced:
        lines += ["", "why not:", *(f"  {g['reason']}" for g in unplaced)]
    topo = out["topology"]
    lines += ["", "levels: " + (" > ".join(level_names.get(k, k) for k in topo["levels"]) or "none (one domain)")
              + (f"; {len(topo['problems'])} topology problem(s): --verbose or -o json lists them"
                 if topo["problems"] else "")]
    return "\n".join(lines)


def read_nodes(path: str, levels: str | None,
               translate: ko.Translator) -> tuple[list[dict[str, Any]], list[NodeFacts], LevelChoice]:
    """A ``--nodes`` file: its objects, its Nodes as facts, and the levels (``--levels K1,K2``, else
    detected from the labels). ``railyard topology`` reads the same file the same way."""
    objects = _objects(path, {"Node"})
    if not any(o["kind"] == "Node" for o in objects):
        raise InputError(f"{path}: no Node objects")
    facts = [translate.node(o) for o in objects if o["kind"] == "Node"]
    keys = [k for k in levels.split(",") if k.strip()] if levels else None
    return objects, facts, ko.explicit_levels(keys) if keys else ko.detect_levels(facts)


def _objects(path: str, kinds: set[str]) -> list[dict[str, Any]]:
    """Objects of the given kinds (or DRA kinds) from a List, a typed list, a single object or YAML documents."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        docs = [json.loads(text)] if text.lstrip().startswith(("{", "[")) else list(yaml.safe_load_all(text))
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0]
        raise InputError(f"{path}: not valid JSON or YAML: {first}") from None
    out: list[dict[str, Any]] = []
    for doc in docs:
        if doc is None:
            continue
        items = doc if isinstance(doc, list) else doc.get("items") if isinstance(doc, dict) and "items" in doc else [doc]
        if not isinstance(items, list):
            raise InputError(f"{path}: 'items' is not a list")
        default_kind = doc.get("kind", "").removesuffix("List") if isinstance(doc, dict) else ""
        for i, obj in enumerate(items):
            if not isinstance(obj, dict):
                raise InputError(f"{path}: item {i} is not an object")
            kind = obj.get("kind") or default_kind
            if kind not in kinds and kind not in ko.DRA_KINDS:
                raise InputError(f"{path}: item {i} has kind {kind or '(none)'!r}, expected {' or '.join(sorted(kinds))} "
                                 f"(or a DRA object: {', '.join(ko.DRA_KINDS)})")
            meta = obj.get("metadata")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
                raise InputError(f"{path}: item {i} ({kind}) has no metadata.name")
            out.append({**obj, "kind": kind})
    return out
