"""The `railyard` command line: one subcommand per module, each adding its own parser.

Each command module offers ``add_parser(subparsers)`` which registers a parser whose
``func`` default is ``run(args) -> int``. Command modules import their heavy dependencies
inside ``run`` so that ``railyard plan`` does not pay for grpc or the kubernetes client.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module providing add_parser(); order is the order of `railyard --help`.
COMMANDS = {
    "plan": "extender.commands.plan",
    "topology": "extender.commands.topology",
    "serve": "extender.commands.serve",
    "explain": "extender.commands.explain",
    "cluster": "extender.localcluster.cli",
    "demo": "extender.commands.demo",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="railyard",
        description="Topology-aware gang placement for GPU training jobs (kube-scheduler extender).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("railyard: interrupted", file=sys.stderr)
        return 130
