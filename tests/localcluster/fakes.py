"""For the localcluster tests: a binary cache without Go, miniature files, `cluster status` of a
state file."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from extender.localcluster import binaries, cli, cluster, processes


def fake_cache(root: Path, components: Iterable[binaries.Component]) -> None:
    """An executable stub for every binary of ``components``, where ``ensure`` looks for it."""
    for component in components:
        directory = binaries.cached_dir(component, root)
        directory.mkdir(parents=True)
        for name in component.packages:
            (directory / name).write_text("#!/bin/sh\n")
            (directory / name).chmod(0o755)


def write(path: Path, text: str) -> None:
    """``text``, dedented, at ``path`` (its directories made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def status_output(workdir: Path, process: str, state: dict[str, Any]) -> str:
    """What ``railyard cluster status`` prints for ``workdir`` while a stand-in for ``process``
    runs and ``cluster.json`` holds the basic fields plus ``state``; it must exit 0."""
    processes.start(workdir, process, ["sleep", "60"])
    try:
        (workdir / "cluster.json").write_text(json.dumps({
            "phase": "running", "apiServer": "https://127.0.0.1:3", "nodes": 1, "extender": None,
            "kubeconfig": "k", **state}))
        parser = argparse.ArgumentParser()
        cli.add_parser(parser.add_subparsers())
        args = parser.parse_args(["cluster", "status", "--workdir", str(workdir)])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert args.func(args) == 0
        return out.getvalue()
    finally:
        cluster.down(workdir)
