"""``railyard topology``: the cluster's tree, as railyard reads it from the node labels, written as
Slurm's topology files, so a Slurm cluster beside railyard (or Slinky inside it) agrees on the
fabric (docs/slurm.md)."""

from __future__ import annotations

import argparse
import sys

from extender.adapters import kubeobjects as ko
from extender.adapters import slurm
from extender.commands.plan import InputError, read_nodes
from extender.core.cluster.topology import Topology
from extender.settings import DEFAULT_GPU_RESOURCE

FORMATS = {
    "slurm-tree": "topology.conf for topology/tree (SwitchName= ... Switches= | Nodes=)",
    "slurm-block": "topology.conf for topology/block (BlockName= ... Nodes=, BlockSizes=)",
    "slurm-yaml": "topology.yaml with both, the tree the cluster default (Slurm 25.05 and later)",
    "slinky": f"one `kubectl annotate node` per node: {slurm.SLINKY_SPEC}, for Slinky's slurm-operator",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "topology",
        help="print the cluster's topology as Slurm's topology.conf / topology.yaml",
        description="Read Nodes from a file (as `kubectl get nodes -o json` prints them), find the topology "
        "levels as `railyard plan` does, and print them for Slurm. Formats: "
        + "; ".join(f"{k}: {v}" for k, v in FORMATS.items()),
    )
    p.add_argument("--nodes", required=True, help="Nodes (a List or NodeList, JSON or YAML)")
    p.add_argument("--format", required=True, choices=list(FORMATS))
    p.add_argument("--levels", help="topology label keys, broadest first (default: detected from node labels)")
    p.add_argument("--block-level", metavar="LEVEL",
                   help="the level whose domains are Slurm's base blocks, a key or short name "
                        "(default: the narrowest NVLink level, else the narrowest level)")
    p.add_argument("--short-names", action="store_true",
                   help="a node's Slurm name is its name up to the first '.' (hostname -s; Slinky's DaemonSet mode)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        _, facts, levels = read_nodes(args.nodes, args.levels, ko.Translator(DEFAULT_GPU_RESOURCE))
        try:
            topo = Topology(levels.levels, facts)
        except ValueError as exc:  # two Nodes of one name
            raise InputError(f"{args.nodes}: {exc}") from None
        tree = slurm.build(topo, args.block_level, args.short_names)
        text = {
            "slurm-tree": slurm.tree_conf,
            "slurm-block": slurm.block_conf,
            "slurm-yaml": slurm.topology_yaml,
            "slinky": lambda t: slurm.slinky(t, topo.names),
        }[args.format](tree)
    except (InputError, slurm.SlurmTopologyError) as exc:
        print(f"railyard topology: {exc}", file=sys.stderr)
        return 2
    for problem in levels.problems:
        print(f"railyard topology: {problem}", file=sys.stderr)
    sys.stdout.write(text)
    return 0
