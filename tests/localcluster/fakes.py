"""Files for the localcluster tests: a binary cache without Go, miniature module trees."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from pathlib import Path

from extender.localcluster import binaries


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
