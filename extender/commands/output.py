"""How the commands that answer a person print: ``-o table`` (aligned columns) or ``-o json``
(the documented document, for scripts), and which one is the default."""

from __future__ import annotations

import argparse
from typing import IO, Sequence


def add_flag(parser: argparse.ArgumentParser, default: str) -> None:
    """``-o/--output {table,json}``; ``default`` ``tty``: a table at a terminal, else JSON."""
    said = "a table at a terminal, JSON otherwise (scripts keep reading JSON)" if default == "tty" else default
    parser.add_argument("-o", "--output", choices=("table", "json"), default=None,
                        help=f"table for people, json for scripts (default: {said})")
    parser.set_defaults(output_default=default)


def wants_json(args: argparse.Namespace, out: IO[str]) -> bool:
    chosen = args.output or args.output_default
    if chosen == "tty":
        return not out.isatty()
    return bool(chosen == "json")


def table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """Rows (the first the header) as aligned columns."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
